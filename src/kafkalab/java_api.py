"""Kafka's Java client from Python: ask the Java compiler whether a snippet still compiles, and
run kafkalab's own Java programs (``program_classpath``, ``java_command``).

Articles quote Java client calls that later releases removed (``KafkaConsumer.poll(long)``,
``KafkaProducer.sendOffsetsToTransaction(Map, String)``, both gone in kafka-clients 4.0, KIP-266
and KIP-732/KIP-447). ``compile_snippet`` puts the snippet in a method of a class whose
parameters are a consumer and a producer, compiles it with ``javac`` against the kafka-clients
jar the brokers run (the pinned 4.4.0, ``cluster.broker_classpath``), and returns what the
compiler said: the live answer to "does this still work?".
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import JAVA_INSTALL, JavaMissing

#: Imports every snippet gets.
IMPORTS = """import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
"""


@dataclass
class CompileResult:
    """``javac``'s answer for one snippet.

    Attributes:
        ok: it compiled.
        errors: each ``error:`` line of javac (file name and line number removed).
        output: everything javac printed.
    """

    snippet: str
    ok: bool
    errors: list[str] = field(default_factory=list)
    output: str = ""


def compile_snippet(snippet: str, timeout_s: float = 120.0) -> CompileResult:
    """Compile ``snippet`` (Java statements) as the body of
    ``void run(KafkaConsumer<String, String> consumer, KafkaProducer<String, String> producer,
    Map<TopicPartition, OffsetAndMetadata> offsets)`` against the brokers' kafka-clients.

    Raises:
        JavaMissing: no ``javac`` on PATH or in ``$JAVA_HOME/bin``.
        JarsMissing: the broker jars are not fetched (``make jars``).
        subprocess.TimeoutExpired: javac took longer than ``timeout_s`` seconds.
    """
    import os

    from . import cluster

    home = os.environ.get("JAVA_HOME")
    javac = str(Path(home) / "bin" / "javac") if home and (Path(home) / "bin" / "javac").exists() else shutil.which("javac")
    if not javac:
        raise JavaMissing("javac is missing: the Java examples are checked with a JDK 17 compiler "
                          f"({JAVA_INSTALL})")
    classpath = cluster.broker_classpath()
    body = "\n".join("        " + line for line in snippet.strip().splitlines())
    source = (f"{IMPORTS}\npublic class Snippet {{\n"
              "    void run(KafkaConsumer<String, String> consumer, KafkaProducer<String, String> producer,\n"
              "             Map<TopicPartition, OffsetAndMetadata> offsets) throws Exception {\n"
              f"{body}\n    }}\n}}\n")
    with tempfile.TemporaryDirectory(prefix="kafkalab-javac-") as d:
        path = Path(d) / "Snippet.java"
        path.write_text(source)
        cp = subprocess.run([javac, "-nowarn", "-Xlint:none", "-d", d, "-cp", classpath, str(path)],
                            capture_output=True, text=True, timeout=timeout_s)
    out = (cp.stdout + cp.stderr).replace(str(path), "Snippet.java")
    errors = [re.sub(r"^Snippet\.java:\d+: error: ", "", line) for line in out.splitlines() if ": error: " in line]
    return CompileResult(snippet.strip(), cp.returncode == 0, errors, out)


#: kafkalab's own Java programs (kafka/src/main/java), compiled by ``make jars`` (kafka/pom.xml)
#: against the pinned kafka-clients, under ``config.jars_dir()``.
CLIENTS_JAR = Path("clients") / "kafkalab-clients.jar"


def program_classpath(java_class: str) -> str:
    """The classpath that runs one of kafkalab's Java programs: ``CLIENTS_JAR``, then the broker
    jars (kafka-clients 4.4.0). Checks, in milliseconds, that ``make jars`` built ``java_class``.

    Args:
        java_class: a fully qualified class name, e.g. ``"kafkalab.clients.OffsetCommitConsumer"``.

    Returns:
        ``"<jars>/clients/kafkalab-clients.jar:<jars>/broker/*"`` (``os.pathsep``-separated).

    Raises:
        JarsMissing: the broker jars, ``CLIENTS_JAR``, or ``java_class`` in it are missing
            (the message names ``make jars``).
    """
    import os
    import zipfile

    from . import cluster, config
    from .errors import JarsMissing

    broker = cluster.broker_classpath()
    jar = config.jars_dir() / CLIENTS_JAR
    try:
        with zipfile.ZipFile(jar) as z:
            z.getinfo(java_class.replace(".", "/") + ".class")
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        raise JarsMissing(f"the Java program {java_class} is not in {jar} ({type(e).__name__}). Run `make jars` "
                          "(Maven compiles kafka/src/main/java into it).") from None
    return f"{jar}{os.pathsep}{broker}"


#: JVM flags of kafkalab's short-lived Java programs: C1 only and the serial collector, a quick
#: start for a JVM that runs seconds (the brokers make the same trade: ``cluster.JVM_PERFORMANCE_OPTS``).
PROGRAM_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
_java: dict[str, str] = {}  # JAVA_HOME and PATH -> the checked java executable


def java_command(classpath: str, main_class: str, *args: str, heap_mb: int = 128,
                 log4j2_config: Path | None = None) -> list[str]:
    """The one command line of a Java program the lab starts (its consumers, producers and
    probes in ``kafka/src/main/java``): ``java -Xmx<heap_mb>m PROGRAM_JVM_FLAGS
    -Dlog4j2.configurationFile=... -cp classpath main_class args...``.

    Args:
        classpath: the JVM's classpath (``program_classpath(main_class)``).
        main_class: fully qualified class name, e.g. ``"kafkalab.clients.OffsetCommitConsumer"``.
        args: the program's arguments, as strings.
        heap_mb: maximum heap, MiB (``-Xmx``).
        log4j2_config: a log4j2 properties file; None: the tools' one
            (``config_templates_dir() / "tools-log4j2.properties"``: warnings and errors only).

    Returns:
        The argv list, ready for ``subprocess`` or ``worker.ExecSpec``.

    Raises:
        JavaMissing: no Java 17 or later (``cluster.java_executable``, checked once per
            ``JAVA_HOME`` and ``PATH``).
    """
    import os

    from . import cluster, config

    where = f"{os.environ.get('JAVA_HOME', '')}:{os.environ.get('PATH', '')}"
    if where not in _java:
        _java[where] = cluster.java_executable()
    log4j2 = log4j2_config or config.config_templates_dir() / "tools-log4j2.properties"
    return [_java[where], f"-Xmx{heap_mb}m", *PROGRAM_JVM_FLAGS, f"-Dlog4j2.configurationFile={log4j2}",
            "-cp", classpath, main_class, *args]
