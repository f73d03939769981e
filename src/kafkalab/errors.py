"""Errors kafkalab raises. Each message says what failed and what to do next."""

from __future__ import annotations


class KafkalabError(RuntimeError):
    """Base class: any error kafkalab raises on purpose (the CLI prints it without a traceback)."""


#: How to install a JDK 17+ and Maven, per platform (the Makefile's check-tools says the same).
JAVA_INSTALL = ("Debian 13 or Ubuntu 24.04: sudo apt install openjdk-21-jdk-headless maven; "
                "macOS: brew install openjdk@21 maven, then export JAVA_HOME=$(brew --prefix openjdk@21)")


class JavaMissing(KafkalabError):
    """No usable ``java`` (17 or later) on PATH."""


class JarsMissing(KafkalabError):
    """The broker or Spark connector jars were not fetched (``make jars``, needs Maven)."""


class PortInUse(KafkalabError):
    """A port the cluster needs is bound by another process (the message names it)."""


class NodeFailedToStart(KafkalabError):
    """A Kafka process exited or never became ready; the message carries its last log lines."""


class ClusterUnreachable(KafkalabError):
    """No broker answered on the bootstrap servers within the timeout."""


class WaitTimeout(KafkalabError, TimeoutError):
    """A condition did not hold within its timeout; the message names the condition."""


class UnknownNode(KafkalabError, KeyError):
    """A node id that is not in the cluster."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DockerUnavailable(KafkalabError):
    """The compose backend cannot run here: no ``docker`` command, no engine answering, or no
    Compose 2.20 or newer (``docker compose``, v5 included); the message says how to get each."""


class ImageMissing(KafkalabError):
    """The compose file's Kafka image is not on this Docker engine and cannot be pulled; the
    message names the command that builds or pulls it."""
