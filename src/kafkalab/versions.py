"""The versions this series teaches, and the ones actually running.

Every claim of a notebook was checked on one set of versions: a default, a code path, a bug
(librdkafka 2.16's idempotent in-flight count, its AdminClient abort) can change with the next
release. Each setup cell asserts ``versions(status) == TAUGHT``, so a notebook run on other
versions stops at once and says which differ, instead of teaching what another version does.

Measured, not copied from a constant: the broker's version is what each running broker logged
at start-up (``AppInfoParser``: "Kafka version: 4.4.0" in ``server.log``; the class is
``org.apache.kafka.common.utils.AppInfoParser`` up to 4.3 and ``...common.utils.internals.AppInfoParser``
from 4.4.0, and both are read) on the local backend,
whose logging kafkalab configures; on the compose backend, whose logging is the image's, it is
the version of the Kafka jar in each running container (``ComposeCluster.kafka_version``).
librdkafka's is what
the loaded library reports (``confluent_kafka.libversion()``), and PySpark's and
confluent-kafka's are the installed distributions' metadata.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from .cluster import ClusterStatus
from .config import KAFKA_VERSION, SPARK_VERSION
from .errors import KafkalabError

#: What the notebooks were checked on (pins: kafka/pom.xml, pyproject.toml).
TAUGHT: dict[str, str] = {
    "kafka": KAFKA_VERSION,
    "confluent-kafka": "2.16.1",
    "librdkafka": "2.16.0",
    "pyspark": SPARK_VERSION,
}

_BROKER_VERSION = re.compile(
    r"INFO Kafka version: (\S+) \(org\.apache\.kafka\.common\.utils\.(?:internals\.)?AppInfoParser\)"
)


def broker_versions(status: ClusterStatus) -> dict[int, str]:
    """Broker id -> the Kafka version it runs: on the local backend the one it logged when it
    last started (the last ``Kafka version:`` line of its ``server.log``); on the compose
    backend the version of the core jar in its container (``ComposeCluster.kafka_version``).

    Raises:
        KafkalabError: a broker's log has no such line (not started by this checkout, or its
            log was removed); a broker's container does not run.
    """
    if status.backend == "compose":
        from .cluster import ComposeCluster

        c = ComposeCluster()
        return {b: c.kafka_version(b) for b in sorted(status.brokers)}
    out = {}
    for b, node in sorted(status.brokers.items()):
        log = Path(node.log_dir) / "server.log"
        found = _BROKER_VERSION.findall(log.read_text(errors="replace")) if log.exists() else []
        if not found:
            raise KafkalabError(f"broker {b}: no 'Kafka version:' line in {log}")
        out[b] = found[-1]
    return out


def versions(status: ClusterStatus) -> dict[str, str]:
    """The running versions, keyed like ``TAUGHT``. ``kafka`` is the brokers' common version,
    or ``"mixed: {id: version}"`` when they differ."""
    import confluent_kafka

    brokers = broker_versions(status)
    kafka = next(iter(brokers.values())) if len(set(brokers.values())) == 1 else f"mixed: {brokers}"
    return {"kafka": kafka, "confluent-kafka": metadata.version("confluent-kafka"),
            "librdkafka": confluent_kafka.libversion()[0], "pyspark": metadata.version("pyspark")}


def differences(status: ClusterStatus) -> dict[str, tuple[str, str]]:
    """``{name: (taught, running)}`` for every version that differs from ``TAUGHT`` (empty
    when all match): what a setup cell's assert prints."""
    running = versions(status)
    return {k: (v, running[k]) for k, v in TAUGHT.items() if running[k] != v}
