"""A small, quiet Spark session and Kafka topics as Spark DataFrames.

The notebooks measure what happened with PySpark, so the same analysis code runs on a
laptop (``local[2]``) or on a real cluster (``SPARK_MASTER=spark://...``). Library
functions here and in ``kafkalab.audit`` return lazy DataFrames or small aggregates;
they never collect a topic or a ledger to the driver.

The Kafka connector (``spark-sql-kafka-0-10``, kafka/spark-connector.pom.xml) is loaded
from the local jars that ``make jars`` downloaded, not resolved from Maven at start-up.
Source: Spark "Structured Streaming + Kafka Integration Guide", batch queries.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kafkalab import config

if TYPE_CHECKING:  # pyspark is imported lazily: importing kafkalab stays fast
    from concurrent.futures import Future

    from pyspark.sql import DataFrame, SparkSession

#: Spark master when ``$SPARK_MASTER`` is unset: two local cores (the lab machine has 2).
DEFAULT_MASTER = "local[2]"

#: Address the driver, its block manager and its RPC endpoints bind to and advertise when Spark runs
#: in this process (``local[...]``): loopback only. Spark's default is the address the machine's
#: hostname resolves to, on every interface, without authentication; where the hostname does not
#: resolve (many macOS machines, VPNs, containers) the session does not start at all
#: (``JAVA_GATEWAY_EXITED``, an ``UnknownHostException`` inside). Source: Spark "Configuration",
#: Networking (``spark.driver.host``, ``spark.driver.bindAddress``) and "Security" (ports).
LOOPBACK = "127.0.0.1"

#: JVM flags for the driver (see ``session_conf``).
DRIVER_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

#: Shuffle partitions for every aggregation: ledgers are small, 200 tasks would be slow.
SHUFFLE_PARTITIONS = 4

#: log4j2 configuration given to the driver JVM: errors only, on stderr. It silences the
#: start-up chatter (``NativeCodeLoader``, ``Utils``, ``SparkContext`` INFO/WARN lines)
#: that appears before ``setLogLevel`` can run.
LOG4J2_PROPERTIES = config.log4j2_stderr(
    "Written by kafkalab.spark: Spark driver logging, errors only.", "error", "%d{HH:mm:ss} %p %c{1}: %m%n%ex",
    extra="""\
# PySpark's gateway is a "shell" to Spark's Logging: unless this logger has its own
# level equal to the root's, Spark prints "Setting default log level to WARN" and
# filters the console at WARN (org.apache.spark.internal.Logging.initializeLogging).
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
""")


def spark_jars() -> list[Path]:
    """Absolute paths of the ``*.jar`` files in ``config.spark_jars_dir()``, sorted.

    Returns:
        The connector jars (spark-sql-kafka-0-10, spark-token-provider-kafka-0-10,
        kafka-clients, commons-pool2), as absolute ``Path`` objects.

    Raises:
        FileNotFoundError: the folder is missing or holds no jar; ``make jars``
            downloads them (kafka/spark-connector.pom.xml).
    """
    folder = config.spark_jars_dir()
    jars = sorted(p.resolve() for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not jars:
        raise FileNotFoundError(
            f"no Spark Kafka connector jars in {folder}: run `make jars` to download them "
            "(kafka/spark-connector.pom.xml)"
        )
    return jars


def log4j2_config_path() -> Path:
    """Write ``LOG4J2_PROPERTIES`` under ``config.state_dir()/spark/`` and return its path.

    The file is rewritten only when its text differs, so concurrent sessions do not race
    on an identical file.
    """
    return config.write_state_file("spark/log4j2.properties", LOG4J2_PROPERTIES)


def session_conf(app_name: str = "kafkalab") -> dict[str, str]:
    """The Spark settings ``session()`` applies, as ``{key: value}`` (pure; for tests and docs).

    Raises:
        FileNotFoundError: from ``spark_jars()`` when the connector jars are missing.
    """
    # C1 only and the serial GC: analysis jobs here are short, and on 2 cores the C2 compiler
    # threads and G1's workers cost the driver more CPU than they win (measured: driver CPU
    # 29.4 -> 13.7 s for notebook 05). Driver only; executors on a real cluster keep theirs.
    java_options = " ".join([f"-Dlog4j2.configurationFile={log4j2_config_path().as_uri()}", *DRIVER_JVM_FLAGS])
    master = os.environ.get("SPARK_MASTER", DEFAULT_MASTER)
    # A driver on this machine alone listens on loopback only; with a real cluster
    # (SPARK_MASTER=spark://..., yarn, k8s) executors elsewhere must reach it, so Spark's own
    # choice (or spark-defaults.conf) stands.
    loopback = {"spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK} if master.startswith("local") else {}
    return {
        "spark.master": master,
        **loopback,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(p) for p in spark_jars()),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": java_options,
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        "spark.sql.session.timeZone": "UTC",
    }


def launcher_environment() -> dict[str, str]:
    """Environment variables ``session()`` sets (unless already set) before Spark's launcher JVM
    starts: with a local master, ``SPARK_LOCAL_IP=127.0.0.1``. Spark's launcher resolves the
    machine's own name while it loads its settings (``Utils.localCanonicalHostName``, before
    ``spark.driver.host`` is read), and where the hostname does not resolve (a container, a
    chroot, many macOS and VPN setups) it exits with ``UnknownHostException`` and PySpark reports
    ``JAVA_GATEWAY_EXITED``; ``SPARK_LOCAL_IP`` is the address it takes instead (Spark
    ``Utils.findLocalInetAddress``). Empty with ``SPARK_MASTER`` naming a cluster."""
    master = os.environ.get("SPARK_MASTER", DEFAULT_MASTER)
    return {"SPARK_LOCAL_IP": LOOPBACK} if master.startswith("local") else {}


#: Settings a Spark Connect client session sets on itself (``session()`` with ``$SPARK_REMOTE``):
#: the SQL settings of ``session_conf`` that a session may change; the rest shape the server's JVM.
REMOTE_SESSION_KEYS = ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone")

#: The session ``serve`` started in this process (it serves Spark Connect clients too).
_served: "SparkSession | None" = None


def session(app_name: str = "kafkalab") -> SparkSession:
    """The process's Spark session, created on first call and reused after (``getOrCreate``).

    Master is ``$SPARK_MASTER`` or ``local[2]``; with a local master the driver (its RPC
    endpoints and block manager) binds to and advertises 127.0.0.1 only, so it starts where the
    hostname does not resolve; the web UI is off, logs are errors only,
    ``spark.sql.shuffle.partitions`` is 4, the driver has 1 GiB and timestamps are UTC.
    ``spark.jars`` lists the Kafka connector jars from ``config.spark_jars_dir()``.
    Settings that shape the JVM (master, jars, memory, java options) only apply when this
    call starts it; an already running session is returned as is.

    With ``$SPARK_REMOTE`` set (``sc://host:port``, PySpark's own variable) the session is a
    Spark Connect client of that server (Spark "Spark Connect Overview"): no JVM starts in this
    process, the same DataFrame code runs on the server's driver, and only the settings of
    ``REMOTE_SESSION_KEYS`` are set here (the server was started with the rest, e.g. by
    ``serve``). ``make test`` runs each lane's notebooks so (``tests/lanes.py``). In the process
    that ``serve`` started a server in, that session is returned.

    Args:
        app_name: Spark application name (shown by a cluster manager).

    Returns:
        A ``pyspark.sql.SparkSession`` (a ``pyspark.sql.connect.session.SparkSession`` with
        ``$SPARK_REMOTE``).

    Raises:
        FileNotFoundError: the connector jars are missing (run ``make jars``).
        pyspark.errors.PySparkException: ``$SPARK_REMOTE`` names a server that does not answer
            (after PySpark's own retries).
    """
    from pyspark.sql import SparkSession

    if _served is not None:
        _make_active(_served)
        return _served
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        spark = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
        conf = session_conf(app_name)
        for key in REMOTE_SESSION_KEYS:
            spark.conf.set(key, conf[key])
        return spark
    for key, value in launcher_environment().items():
        os.environ.setdefault(key, value)  # the launcher JVM inherits this process's environment
    builder = SparkSession.builder
    for key, value in session_conf(app_name).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def serve(port: int, app_name: str = "kafkalab-connect") -> SparkSession:
    """Start this process's Spark session (``session``) with a Spark Connect server in its driver,
    listening on 127.0.0.1:``port`` only, and return it; a client elsewhere reaches it with
    ``SPARK_REMOTE=sc://127.0.0.1:<port>``. One JVM then serves every notebook kernel of a test
    lane: each kernel's ``session()`` is a client, not a JVM of its own (``tests/lanes.py``).
    Python code the clients send to run on the server (``foreachBatch``) runs in workers of
    this process's interpreter (``PYSPARK_PYTHON`` is set to it unless already set).

    The server is Spark's ``SparkConnectPlugin`` (``spark.plugins``), with
    ``spark.connect.grpc.binding.address`` and ``spark.connect.grpc.binding.port`` (Spark
    "Spark Connect Overview", "Configuration": Spark Connect). Stop it with ``stop_served``.

    Args:
        port: TCP port of the gRPC server (1024-65535).
        app_name: Spark application name.

    Returns:
        The ``pyspark.sql.SparkSession`` of this process.

    Raises:
        FileNotFoundError: the connector jars are missing (run ``make jars``).
        RuntimeError: a session already runs in this process (its JVM cannot take the plugin).
    """
    global _served
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None or _served is not None:
        raise RuntimeError("serve() must start this process's Spark session: one runs already")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in launcher_environment().items():
        os.environ.setdefault(key, value)
    remote = os.environ.pop("SPARK_REMOTE", None)  # this process's own session is the classic one
    try:
        builder = SparkSession.builder
        conf = {**session_conf(app_name), "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
                "spark.connect.grpc.binding.address": LOOPBACK, "spark.connect.grpc.binding.port": str(port)}
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    finally:
        if remote is not None:
            os.environ["SPARK_REMOTE"] = remote
    spark.sparkContext.setLogLevel("ERROR")
    _served = spark
    return spark


def _make_active(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread, as PySpark's own
    ``createDataFrame`` does: the JVM keeps the active session per thread, and a thread without
    one whose code asks for it (``DataFrameReader.schema`` with a ``StructType``) would otherwise
    try to build a session of its own, a Spark Connect one where ``$SPARK_REMOTE`` is set."""
    from pyspark.sql import SparkSession

    SparkSession._activeSession = spark
    SparkSession._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)


def stop_served() -> None:
    """Stop the session ``serve`` started, and its Spark Connect server; nothing if none runs."""
    global _served
    if _served is not None:
        spark, _served = _served, None
        spark.stop()


def reader_options(bootstrap_servers: str, **options: Any) -> dict[str, str]:
    """Reader options for the Kafka source: defaults, then ``options`` translated.

    A key starting with ``kafka_`` becomes a consumer property: ``kafka_`` -> ``kafka.``
    and every other ``_`` -> ``.`` (``kafka_isolation_level="read_committed"`` ->
    ``kafka.isolation.level``). Any other key is a connector option passed verbatim
    (``startingOffsets="latest"``, ``maxOffsetsPerTrigger=1000``). Values become strings;
    booleans become ``"true"``/``"false"``. Later keys override the defaults.

    Defaults: ``kafka.bootstrap.servers``, ``startingOffsets=earliest``,
    ``endingOffsets=latest``, ``includeHeaders=true``.
    """
    out: dict[str, str] = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        "includeHeaders": "true",
    }
    for key, value in options.items():
        name = "kafka." + key[len("kafka_") :].replace("_", ".") if key.startswith("kafka_") else key
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def read_topic(
    spark: SparkSession,
    topic: str,
    bootstrap_servers: str | None = None,
    **kafka_options: Any,
) -> DataFrame:
    """A topic as a batch DataFrame, from its earliest to its latest offsets (lazy).

    Uses the Spark Kafka source (``spark.read.format("kafka")``, ``subscribe=topic``).
    Columns: ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int,
    ``offset`` long, ``timestamp`` timestamp (UTC), ``timestampType`` int, ``headers``
    array<struct<key string, value binary>>. Cast ``key``/``value`` to string to read
    text records.

    Args:
        spark: the session (``session()``).
        topic: topic name.
        bootstrap_servers: ``host:port,...``; default ``config.bootstrap_servers()``.
        **kafka_options: more reader options. ``kafka_<name>`` becomes the consumer
            property ``kafka.<name with _ as .>`` (``kafka_isolation_level="read_committed"``
            -> ``kafka.isolation.level``); other keys are connector options, verbatim
            (``startingOffsets="latest"``, ``failOnDataLoss=False``).

    Returns:
        A lazy ``pyspark.sql.DataFrame``; nothing is read until an action runs.

    Raises:
        Nothing here; an unreachable cluster fails the first action (a Spark
        ``Py4JJavaError``/``SparkException`` with a Kafka ``TimeoutException`` inside).

    Source: Spark "Structured Streaming + Kafka Integration Guide" (batch queries; the
    ``kafka.`` prefix passes consumer configs through). Note that the connector's consumer
    is the Java client, so ``kafka.isolation.level`` defaults to ``read_uncommitted``,
    unlike librdkafka (FACTS.md).
    """
    servers = bootstrap_servers or config.bootstrap_servers()
    reader = spark.read.format("kafka").option("subscribe", topic)
    for key, value in reader_options(servers, **kafka_options).items():
        reader = reader.option(key, value)
    return reader.load()


def session_in_background(
    app_name: str = "kafkalab", warm_up: Callable[[SparkSession], object] | None = None
) -> "Future[SparkSession]":
    """Start ``session(app_name)`` in a background thread, so a notebook's Kafka experiments
    run while the JVM starts (~5 s on an idle 2-core machine, 10-40 s under load). The one
    warm start of the package: a notebook starts its session with this, passing its family's
    warm-up (``experiments/NAME_analysis.warm_up``) when it has one.

    Args:
        app_name: Spark application name.
        warm_up: optional callable run on the new session in the same thread, e.g. the
            query the notebook runs later, on a few planted rows: a new JVM's first query pays
            for class loading and code generation, and this pays it early, while Kafka runs.
            Default: ``default_warm_up`` (one tiny group-by count).

    Returns:
        ``concurrent.futures.Future`` whose ``result(timeout)`` is the SparkSession (it
        re-raises what ``session`` or ``warm_up`` raised, e.g. ``FileNotFoundError`` when the
        connector jars are missing). Stop it with ``stop_in_background``.
    """
    from concurrent.futures import ThreadPoolExecutor

    def start() -> SparkSession:
        spark = session(app_name)
        (warm_up or default_warm_up)(spark)
        return spark

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-start")
    future = pool.submit(start)
    pool.shutdown(wait=False)
    return future


def default_warm_up(spark: SparkSession) -> None:
    """One tiny group-by count (``range(10)`` by ``id % 2``): loads the classes of a
    shuffle and an aggregation, which nearly every analysis runs."""
    from pyspark.sql import functions as F

    spark.range(10).groupBy((F.col("id") % 2).alias("k")).count().collect()


def stop_in_background(future: "Future[SparkSession]", timeout_s: float = 300.0) -> None:
    """Stop the session a ``session_in_background`` future yields, waiting up to ``timeout_s``
    (s) for it to finish starting; nothing to do if it failed to start or did not start in
    time (the JVM then ends with the Python process)."""
    try:
        spark = future.result(timeout=timeout_s)
    except Exception:  # it never started: nothing to stop
        return
    spark.stop()
