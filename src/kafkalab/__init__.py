"""kafkalab: reproduce Kafka's delivery anomalies on a real 3-broker cluster and count them.

Modules, named with Kafka's own words: ``cluster`` (start, stop, break the cluster; Kafka's
CLI tools), ``workloads`` (producers, consumer groups), ``ledger`` (what each
experiment did, as JSON lines), ``audit`` (PySpark checks in Jepsen's terms), ``spark``
(SparkSession with the Kafka connector), ``data`` (the flights records), ``experiments``
(one family of modules per notebook: run, ``_analysis``, ``_plots``), ``cli``; ``admin`` (create and delete
topics, delete groups) and ``runscope`` (unique names per run, their cleanup, and the "cluster is
whole" precondition).

``require_cluster()`` is what every notebook's setup cell calls first:
``kafkalab.runscope.require_whole_cluster`` (it restarts a node that is down and says so, or
fails in seconds with the command that fixes it). Then ``version_differences(status)``: the
versions running that differ from the ones the notebooks were checked on (``kafkalab.versions``).
"""

from .config import KAFKA_VERSION, SPARK_VERSION
from .runscope import require_whole_cluster as require_cluster
from .versions import TAUGHT as TAUGHT_VERSIONS
from .versions import differences as version_differences

__version__ = "0.1.0"
__all__ = ["require_cluster", "version_differences", "TAUGHT_VERSIONS", "KAFKA_VERSION", "SPARK_VERSION", "__version__"]
