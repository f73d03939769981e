"""kafkalab.spark: session settings, reader options, and a real read of a topic."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalab import cluster, config
from kafkalab import spark as kspark
from kafkalab.waiting import wait_until


def test_kafka_prefixed_options_become_consumer_properties() -> None:
    options = kspark.reader_options(
        "h:1", kafka_isolation_level="read_committed", startingOffsets="latest", failOnDataLoss=False
    )
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["startingOffsets"] == "latest", "other keys are passed verbatim and override defaults"
    assert options["failOnDataLoss"] == "false"
    assert options["kafka.bootstrap.servers"] == "h:1"
    assert (options["endingOffsets"], options["includeHeaders"]) == ("latest", "true")


@pytest.fixture
def planted_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``KAFKALAB_JARS`` with empty stand-ins of the connector jars in ``spark/`` (make check has
    no jars: they come from Maven): the session settings list them, and nothing reads them."""
    spark_jars = tmp_path / "spark"
    spark_jars.mkdir()
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
                 "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"):
        (spark_jars / name).touch()
    monkeypatch.setenv("KAFKALAB_JARS", str(tmp_path))
    return spark_jars


@pytest.mark.usefixtures("planted_jars")
def test_session_conf_lists_every_connector_jar() -> None:
    conf = kspark.session_conf()
    jars = conf["spark.jars"].split(",")
    assert sorted(jars) == sorted(str(p.resolve()) for p in config.spark_jars_dir().glob("*.jar"))
    assert all(Path(j).is_absolute() for j in jars)
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.shuffle.partitions"] == "4"


@pytest.mark.usefixtures("planted_jars")
def test_session_conf_takes_the_master_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_MASTER", "spark://example:7077")
    assert kspark.session_conf()["spark.master"] == "spark://example:7077"
    monkeypatch.delenv("SPARK_MASTER")
    assert kspark.session_conf()["spark.master"] == "local[2]"


@pytest.mark.usefixtures("planted_jars")
def test_a_local_driver_listens_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    conf = kspark.session_conf()
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    assert conf["spark.ui.enabled"] == "false", "no web UI listens at all"
    monkeypatch.setenv("SPARK_MASTER", "spark://example:7077")
    conf = kspark.session_conf()
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf, (
        "with a real cluster the executors must reach the driver: Spark's own address stands")


def test_the_launcher_takes_loopback_where_the_hostname_may_not_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spark's launcher resolves the hostname before it reads spark.driver.host: without
    # SPARK_LOCAL_IP it exits (JAVA_GATEWAY_EXITED) on a machine whose name does not resolve.
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    assert kspark.launcher_environment() == {"SPARK_LOCAL_IP": "127.0.0.1"}
    monkeypatch.setenv("SPARK_MASTER", "spark://elsewhere:7077")
    assert kspark.launcher_environment() == {}, "executors elsewhere must reach a cluster's driver"


def _loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback (``::ffff:127.0.0.1``, how a JVM's
    dual-stack socket bound to 127.0.0.1 shows)."""
    import ipaddress

    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


@pytest.mark.spark
def test_the_running_driver_listens_on_loopback_only(spark) -> None:
    import psutil

    if os.environ.get("SPARK_MASTER", "local").split("[")[0] != "local":
        pytest.skip("SPARK_MASTER names a cluster: its driver listens where the executors reach it")
    spark.range(3).count()  # the block manager is up
    # A broker a notebook kernel restarted is a child too; its listeners are the cluster's, and its
    # JMX agent's local connector binds every interface (cluster.common.jmx_flags): not Spark's.
    jvms = [p for p in psutil.Process().children(recursive=True) if "java" in p.name()
            and not any(a.startswith("-Dkafkalab.node=") for a in p.cmdline())]
    assert jvms, "PySpark should have started its driver JVM as a child of this process"
    listening = {(c.laddr.ip, c.laddr.port) for p in jvms for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN}
    assert listening, "the driver should listen somewhere (its RPC endpoint, the block manager, py4j)"
    elsewhere = {addr for addr in listening if not _loopback(addr[0])}
    assert not elsewhere, f"the Spark driver listens beyond loopback: {sorted(elsewhere)}"


def test_missing_connector_jars_name_make_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAB_JARS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make jars"):
        kspark.spark_jars()


@pytest.mark.cluster
@pytest.mark.spark
def test_read_topic_reads_what_confluent_kafka_produced(spark) -> None:
    if os.environ.get("KAFKALAB_SKIP_CLUSTER"):
        pytest.skip("KAFKALAB_SKIP_CLUSTER is set: not using the live cluster")
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    servers = config.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": servers})
    try:
        brokers = len(admin.list_topics(timeout=10).brokers)
    except KafkaException as e:
        pytest.fail(f"no Kafka cluster at {servers} ({e}): start it with `kafkalab up`")
    topic = f"test-read-topic-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=min(3, brokers))])
    futures[topic].result(timeout=30)
    try:
        acked: dict[str, tuple[int, int]] = {}

        def on_delivery(err, msg) -> None:
            assert err is None, f"delivery failed: {err}"
            acked[msg.value().decode()] = (msg.partition(), msg.offset())

        producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
        for i in range(10):
            producer.produce(topic, key=f"key-{i}", value=f"flight-{i}", on_delivery=on_delivery)
        assert producer.flush(30) == 0, "every record should be delivered within 30 s"

        frame = kspark.read_topic(spark, topic).selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
        )
        rows = frame.collect()  # 10 rows: fine in a test
        assert len(rows) == 10
        assert {r.value: (r.partition, r.offset) for r in rows} == acked
        assert {r.partition for r in rows} == {p for p, _ in acked.values()}
        assert {(r.key, r.value) for r in rows} == {(f"key-{i}", f"flight-{i}") for i in range(10)}
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


@pytest.fixture()
def spark_remote() -> Iterator[str]:
    """A Spark Connect server's URL: the lane's (``make test`` sets ``SPARK_REMOTE``, tests/lanes.py),
    else one ``kafkalab.spark.serve`` started in a child process for this test."""
    if os.environ.get("SPARK_REMOTE"):
        yield os.environ["SPARK_REMOTE"]
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from kafkalab import spark; spark.serve(int(sys.argv[1])); sys.stdin.read()"
    server = subprocess.Popen([sys.executable, "-c", code, str(port)], stdin=subprocess.PIPE)
    try:
        def listening() -> bool:
            assert server.poll() is None, f"the server process ended (exit {server.returncode})"
            return cluster.port_accepts(port)
        wait_until(listening, timeout_s=240, interval_s=0.5, what=f"the Spark Connect server to listen on port {port}")
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.spark
def test_with_spark_remote_a_process_is_a_client_and_starts_no_jvm(spark_remote: str) -> None:
    code = """
import json, psutil
from kafkalab import spark as kspark
from pyspark.sql import functions as F
s = kspark.session("remote-test")
rows = s.range(10).groupBy((F.col("id") % 2).alias("k")).count().orderBy("k").collect()
jvms = [p.name() for p in psutil.Process().children(recursive=True) if "java" in p.name()]
print(json.dumps({"type": type(s).__module__, "rows": [[r.k, r["count"]] for r in rows], "jvms": jvms,
                  "partitions": s.conf.get("spark.sql.shuffle.partitions")}))
s.stop()
"""
    env = {**os.environ, "SPARK_REMOTE": spark_remote}
    cp = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stderr[-3000:]
    import json

    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out["type"] == "pyspark.sql.connect.session", f"not a Spark Connect client session: {out}"
    assert out["rows"] == [[0, 5], [1, 5]], out
    assert out["jvms"] == [], f"a Spark Connect client starts no JVM of its own: {out['jvms']}"
    assert out["partitions"] == str(kspark.SHUFFLE_PARTITIONS), "the client session sets the lab's SQL settings"
