"""Class-data sharing for the lab's JVMs: a warm start for brokers, controllers and Kafka's tools.

A JVM start spends most of its CPU loading and verifying classes (a broker loads about 9,000).
HotSpot can map them from an archive written by an earlier run of the same program (a dynamic
CDS archive, JEP 350, Java 13 and later): measured on this 2-core machine, Kafka 4.3.1 on
OpenJDK 17, a whole cluster's start took 13.7 CPU-s without one and 8.8 with one, and
``kafka-topics --list`` 1.1 CPU-s against 0.6 (``benchmarks/README.md``).

The lab keeps one archive per kind of JVM (``"node"``: brokers and controllers; ``"tool"``:
Kafka's admin tools with ``cluster.TOOL_JVM_FAST``) beside the jars it is made of
(``config.jars_dir() / "cds"``, shared like them by every state folder, so a second cluster or a
``make test`` lane starts warm), named by a digest of the java executable and the classpath, so
that another JDK or other jars never meet an archive made for different ones. HotSpot checks an archive's classpath and JVM build itself and ignores a
mismatched one without a word (``-Xshare:auto``, the default), but a truncated archive crashes
the JVM (SIGBUS, measured), so an archive is written to a temporary name, tried once with
``-Xshare:on``, and only then renamed into place (``os.replace``, atomic).

Where an archive comes from:

- ``"node"``: a node started while there is none runs with ``-XX:+RecordDynamicDumpInfo``; once the
  cluster serves, ``cluster`` asks one broker for its loaded classes with ``jcmd <pid> VM.cds
  dynamic_dump`` (Java 17 and later; about 2 s, once).
- ``"tool"``: a tool run while there is none runs with ``-XX:ArchiveClassesAtExit`` and writes it
  when it exits (about 2 CPU-s more than a plain run, once).

Only HotSpot JVMs take these flags; every other case (no ``jcmd``, a failed dump) leaves the JVMs
as they were: this is a speed-up, never a requirement. Source: JEP 350 (Dynamic CDS Archiving),
JDK-8259070 (``jcmd VM.cds dynamic_dump``, Java 17), the ``java`` command's manual, section
"Application Class Data Sharing".
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from . import config

log = logging.getLogger(__name__)

#: The flag that lets ``jcmd VM.cds dynamic_dump`` write an archive of a running JVM.
RECORD_FLAG = "-XX:+RecordDynamicDumpInfo"
#: Seconds a dump (``jcmd`` or a check of a new archive) may take before it is given up.
DUMP_TIMEOUT_S = 60.0


def archive_path(kind: str, java: str, classpath: str) -> Path:
    """Where the archive of ``kind`` (``"node"`` or ``"tool"``) for this java and classpath lives.

    The name carries a digest of the java executable (its resolved path, size and modification
    time) and the classpath (with the jars a wildcard entry names), so a new JDK or new jars get
    an archive of their own.
    """
    real = os.path.realpath(java)
    parts = [kind, real, _stamp(real), classpath]
    for entry in classpath.split(os.pathsep):
        if entry.endswith("*"):  # the launcher expands a wildcard: the jars in it count
            folder = Path(entry[:-1])
            parts += sorted(f"{p.name}:{_stamp(str(p))}" for p in folder.glob("*.jar")) if folder.is_dir() else []
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return config.jars_dir() / "cds" / f"{kind}-{digest}.jsa"


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
        return f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return "?"


def use_flags(kind: str, java: str, classpath: str) -> list[str]:
    """``["-XX:SharedArchiveFile=<archive>"]`` if the archive of ``kind`` exists, else ``[]``."""
    path = archive_path(kind, java, classpath)
    return [f"-XX:SharedArchiveFile={path}"] if path.is_file() else []


def _temporary(final: Path) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    return final.with_name(f"{final.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def exit_dump_flags(kind: str, java: str, classpath: str) -> tuple[list[str], Path | None]:
    """Flags for a JVM that writes the missing archive of ``kind`` when it exits, and the temporary
    file it writes (give it to ``adopt`` after a clean exit). ``([], None)`` if the archive exists."""
    final = archive_path(kind, java, classpath)
    if final.is_file():
        return [], None
    tmp = _temporary(final)
    # the dump warns about classes it leaves out on stdout, where a tool's output goes: stderr
    return [f"-XX:ArchiveClassesAtExit={tmp}", "-Xlog:disable", "-Xlog:all=warning:stderr:uptime,level,tags"], tmp


def adopt(tmp: Path, kind: str, java: str, classpath: str) -> bool:
    """Move a freshly written archive into place if a JVM can map it (``-Xshare:on``, which fails
    instead of ignoring a bad archive); delete it otherwise. Returns True if it was adopted."""
    final = archive_path(kind, java, classpath)
    try:
        if not tmp.is_file():
            return False
        # a bad archive crashes this JVM: its crash report goes beside the archive, then away
        report = tmp.with_suffix(".crash.log")
        check = subprocess.run([java, f"-XX:SharedArchiveFile={tmp}", "-Xshare:on", f"-XX:ErrorFile={report}",
                                "-cp", classpath, "-version"], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
        report.unlink(missing_ok=True)
        if check.returncode != 0:
            log.info("CDS archive %s refused (%s): not used", tmp, check.stdout.strip() or check.stderr.strip())
            return False
        os.replace(tmp, final)
        return True
    except (OSError, subprocess.SubprocessError) as e:
        log.info("CDS archive %s not adopted: %s", tmp, e)
        return False
    finally:
        tmp.unlink(missing_ok=True)


def dump_running(pid: int, kind: str, java: str, classpath: str) -> bool:
    """Write the archive of ``kind`` from the classes JVM ``pid`` has loaded (it must run with
    ``RECORD_FLAG``), with ``jcmd``. Returns True if an archive is in place afterwards."""
    if archive_path(kind, java, classpath).is_file():
        return True
    jcmd = Path(os.path.realpath(java)).with_name("jcmd")
    tool = str(jcmd) if jcmd.exists() else shutil.which("jcmd")
    if not tool:
        return False
    tmp = _temporary(archive_path(kind, java, classpath))
    try:
        cp = subprocess.run([tool, str(pid), "VM.cds", "dynamic_dump", str(tmp)], capture_output=True, text=True,
                            timeout=DUMP_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        log.info("jcmd %s VM.cds dynamic_dump failed: %s", pid, e)
        tmp.unlink(missing_ok=True)
        return False
    if cp.returncode != 0:
        log.info("jcmd %s VM.cds dynamic_dump exited %s: %s", pid, cp.returncode, cp.stdout.strip())
        tmp.unlink(missing_ok=True)
        return False
    return adopt(tmp, kind, java, classpath)
