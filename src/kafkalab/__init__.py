"""kafkalab: reproduce Kafka's delivery anomalies on a real 3-broker cluster and count them.

Modules, named with Kafka's own words: ``cluster`` (start, stop, break the cluster; Kafka's
CLI tools), ``workloads`` (topics, producers, consumer groups), ``ledger`` (what each
experiment did, as JSON lines), ``audit`` (PySpark checks in Jepsen's terms), ``spark``
(SparkSession with the Kafka connector), ``data`` (the flights records), ``experiments``
(one family of modules per notebook: run, ``_analysis``, ``_plots``), ``cli``.
"""

from .cluster import require_cluster
from .config import KAFKA_VERSION, SPARK_VERSION

__version__ = "0.1.0"
__all__ = ["require_cluster", "KAFKA_VERSION", "SPARK_VERSION", "__version__"]
