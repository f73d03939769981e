"""The local backend: each node a JVM process (``kafka.Kafka``) on this machine, from the jars
``make jars`` fetched, with per-node config, data and logs under ``.kafkalab/cluster/node-<id>/``.

Sources: Kafka documentation "KRaft" (Operations > KRaft), bin/kafka-server-start.sh at tag 4.3.1,
kafka.tools.StorageTool (format).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import psutil

from .. import cds, config
from ..config import KAFKA_VERSION, Node, Topology
from ..errors import KafkalabError, NodeFailedToStart, UnknownNode
from ..waiting import wait_until
from .common import (
    JVM_PERFORMANCE_OPTS, _MARK, STOP_TIMEOUT_S, TOOLS, UP_TIMEOUT_S, ClusterStatus, NodeStatus,
    broker_classpath, check_ports_free, jmx_flags, ensure_tls_files, java_executable, last_log_lines, port_accepts,
    registered_brokers, _wait_gone,
)


class LocalCluster:
    """The cluster as local JVM processes. Stateless: every call reads pids from the
    per-node ``pid`` files and checks the process's command line, so a new Python process
    (CLI, notebook, test) sees the same cluster."""

    backend = "local"
    #: What each fault verb does to a node, in the words a timeline shows (``fault_name``).
    FAULTS = {"kill": "SIGKILL", "stop": "SIGTERM", "pause": "SIGSTOP", "resume": "SIGCONT"}

    def __init__(self, topology: Topology | None = None):
        self.topology = topology or self._saved_topology() or Topology()
        self._log_marks: dict[int, int] = {}

    # --- persistence of the chosen topology
    @staticmethod
    def _topology_file() -> Path:
        return config.cluster_dir() / "topology.json"

    @classmethod
    def _saved_topology(cls) -> Topology | None:
        f = cls._topology_file()
        if f.exists():
            return Topology(**json.loads(f.read_text()))
        return None

    # --- processes
    def process(self, node: Node) -> psutil.Process | None:
        """The node's live process, or None. Checks the command line carries the node's
        marker and this state folder, so a recycled pid is never mistaken for a broker."""
        pid_file = node.dir / "pid"
        if not pid_file.exists():
            return None
        try:
            p = psutil.Process(int(pid_file.read_text().strip()))
            cmd = p.cmdline()
            if f"{_MARK}{node.node_id}" in cmd and str(node.config_path) in cmd and p.status() != psutil.STATUS_ZOMBIE:
                return p
        except (ValueError, psutil.Error):
            pass
        return None

    def _node_status(self, node: Node) -> NodeStatus:
        p = self.process(node)
        paused = False
        if p is not None:
            try:
                paused = p.status() == psutil.STATUS_STOPPED
            except psutil.Error:
                p = None
        return NodeStatus(
            node_id=node.node_id,
            role=node.role,
            pid=p.pid if p else None,
            alive=p is not None,
            paused=paused,
            listeners=node.listeners(),
            log_dir=str(node.log_dir),
            data_dir=str(node.data_dir),
        )

    def _live_controllers(self) -> list[Node]:
        return [n for n in self.topology.controller_nodes if self.process(n) is not None]

    def quorum_leader(self) -> int | None:
        """Active controller id from ``__cluster_metadata-0/quorum-state`` of live controllers
        (the file KRaft writes on every election; KIP-595)."""
        return self._leader_of(self._live_controllers())

    @staticmethod
    def _leader_of(controllers: Sequence[Node]) -> int | None:
        """The leader the ``quorum-state`` files of ``controllers`` name at the highest epoch."""
        best: tuple[int, int] | None = None  # (epoch, leader)
        for node in controllers:
            f = node.data_dir / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[0]):
                best = (epoch, leader)
        return best[1] if best else None

    def status(self) -> ClusterStatus:
        """Every node's process state; cheap (no network)."""
        return ClusterStatus(
            backend=self.backend,
            kafka_version=KAFKA_VERSION,
            bootstrap_servers=self.topology.bootstrap_servers,
            brokers={n.node_id: self._node_status(n) for n in self.topology.brokers},
            controllers={n.node_id: self._node_status(n) for n in self.topology.controller_nodes},
            quorum_leader=self.quorum_leader(),
        )

    def _jvm_command(self, node: Node, java: str, classpath: str, main: str, args: Sequence[str], heap_mb: int) -> list[str]:
        return [
            java,
            f"-Xms{heap_mb}m",
            f"-Xmx{heap_mb}m",
            *JVM_PERFORMANCE_OPTS,
            *(jmx_flags(node.jmx_port) if node.role == "broker" else []),
            *(cds.use_flags("node", java, classpath) or [cds.RECORD_FLAG]),
            f"-Dkafka.logs.dir={node.log_dir}",
            f"-Dlog4j2.configurationFile={config.config_templates_dir() / 'log4j2.properties'}",
            f"{_MARK}{node.node_id}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _prepare(self, node: Node) -> None:
        node.log_dir.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)
        if node.role == "broker":
            ensure_tls_files()
        text = self.topology.render(node)
        if not node.config_path.exists() or node.config_path.read_text() != text:
            node.config_path.write_text(text)

    def _format_all(self, nodes: list[Node], java: str, classpath: str) -> None:
        """``kafka-storage format`` each node that has no meta.properties, in parallel."""
        todo = [n for n in nodes if not (n.data_dir / "meta.properties").exists()]
        if not todo:
            return
        procs = []
        for n in todo:
            cmd = [java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   f"-Dlog4j2.configurationFile={config.config_templates_dir() / 'tools-log4j2.properties'}",
                   "-cp", classpath, TOOLS["kafka-storage"],
                   "format", "--ignore-formatted", "-t", config.CLUSTER_ID, "-c", str(n.config_path)]
            procs.append((n, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        for n, p in procs:
            out, _ = p.communicate(timeout=120)
            if p.returncode != 0:
                raise NodeFailedToStart(f"formatting the storage of {n.name} failed (exit {p.returncode}):\n{out}")

    def _spawn(self, node: Node, java: str, classpath: str) -> psutil.Process:
        check_ports_free(node)
        server_log = node.log_dir / "server.log"
        # where this incarnation's log starts: readiness is read from what it writes
        self._log_marks[node.node_id] = server_log.stat().st_size if server_log.exists() else 0
        cmd = self._jvm_command(node, java, classpath, "kafka.Kafka", [str(node.config_path)], node.heap_mb)
        with open(node.dir / "stdout.log", "ab") as out:
            out.write(f"\n=== kafkalab start {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n".encode())
            out.flush()
            # new session: Ctrl-C in a terminal or notebook does not reach the brokers;
            # kafkalab down stops them.
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=node.dir)
        (node.dir / "pid").write_text(str(popen.pid))
        proc = psutil.Process(popen.pid)

        def args_readable() -> bool:
            try:
                return popen.poll() is not None or f"{_MARK}{node.node_id}" in proc.cmdline()
            except psutil.Error:
                return True  # gone already: _wait_serving reports it with its log
        # Popen returns once the exec has begun; the kernel sets the new command line a moment
        # later (load_elf_binary), and until then /proc/<pid>/cmdline reads empty, so process()
        # would call a starting node dead (seen on a loaded machine: "broker-3 exited while
        # starting" while it started). Wait for it.
        wait_until(args_readable, timeout_s=10, interval_s=0.01, what=f"{node.name}'s command line in /proc/{popen.pid}")
        return proc

    def _wait_serving(self, nodes: list[Node], timeout_s: float) -> None:
        """Until every controller port accepts, a quorum leader is known, and every broker in
        ``nodes`` is registered in the metadata. Fails fast if a process dies."""
        brokers = {n.node_id for n in nodes if n.role == "broker"}

        def dead_node_error() -> None:
            for n in nodes:
                if self.process(n) is None:
                    raise NodeFailedToStart(f"{n.name} exited while starting.\n{last_log_lines(n)}")

        def started_since_spawn(n: Node) -> bool:
            # A killed broker stays registered until the controller fences it, so the
            # metadata alone would call a restarting broker ready too early.
            mark = self._log_marks.get(n.node_id)
            if mark is None:
                return True
            try:
                with open(n.log_dir / "server.log", "rb") as f:
                    f.seek(mark)
                    return b"Kafka Server started" in f.read()
            except OSError:
                return False

        def ready() -> bool:
            dead_node_error()
            if not all(started_since_spawn(n) for n in nodes):
                return False
            if any(not port_accepts(n.controller_port) for n in self.topology.controller_nodes):
                return False
            if self.quorum_leader() is None:
                return False
            if brokers:
                return brokers <= registered_brokers(self.topology.bootstrap_servers, timeout_s=1.0)
            return True

        names = ", ".join(n.name for n in nodes)
        wait_until(ready, timeout_s=timeout_s, interval_s=0.25,
                   what=f"{names} to serve (controller ports open, quorum leader elected, brokers registered)",
                   on_timeout=lambda: "\n".join(last_log_lines(n, 10) for n in nodes))

    def up(self, controllers: int | None = None, timeout_s: float = UP_TIMEOUT_S) -> ClusterStatus:
        """Start every node that is not running (idempotent) and wait until the cluster serves.

        Args:
            controllers: 1 or 3 KRaft controllers; None keeps the saved choice (default 1).
            timeout_s: how long to wait for all nodes to serve.

        Returns:
            ClusterStatus once 3 brokers are registered and the quorum has a leader.

        Raises:
            JavaMissing, JarsMissing, PortInUse, NodeFailedToStart, WaitTimeout;
            KafkalabError if the cluster runs with a different number of controllers.
        """
        if controllers is not None and controllers != self.topology.controllers:
            if any(self.process(n) for n in self.topology.nodes):
                raise KafkalabError(
                    f"the cluster runs with {self.topology.controllers} controller(s); "
                    f"`kafkalab down` first, then `kafkalab up --controllers {controllers}`"
                )
            if self._saved_topology() is not None:
                # a quorum's voter set is fixed at format time: start from fresh storage
                shutil.rmtree(config.cluster_dir(), ignore_errors=True)
            self.topology = Topology(controllers=controllers)
        java_executable()  # JavaMissing before anything is written
        broker_classpath()  # JarsMissing likewise
        config.cluster_dir().mkdir(parents=True, exist_ok=True)
        self._topology_file().write_text(json.dumps(self.topology.to_json()))
        self.start_many([n.node_id for n in self.topology.nodes], timeout_s)
        return self.status()

    def down(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop every node: brokers first (controlled shutdown needs the controllers), then
        controllers. A node that does not exit within ``timeout_s`` is killed. Leaves no process."""
        brokers = [n for n in self.topology.brokers if self.process(n)]
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda n: self._stop(n, timeout_s), brokers))
        for n in self.topology.controller_nodes:
            if self.process(n):
                self._stop(n, timeout_s)

    def _stop(self, node: Node, timeout_s: float) -> None:
        p = self.process(node)
        if p is None:
            return
        try:
            if p.status() == psutil.STATUS_STOPPED:
                p.resume()  # a paused JVM cannot handle SIGTERM
            p.terminate()
            if not _wait_gone(p, timeout_s, node.ports.values()):
                p.kill()
                if not _wait_gone(p, 10, node.ports.values()):
                    raise KafkalabError(f"{node.name} (pid {p.pid}) survived SIGKILL for 10 s")
        except psutil.NoSuchProcess:
            pass

    def _node(self, node_id: int) -> Node:
        try:
            return self.topology.node(int(node_id))
        except KeyError as e:
            raise UnknownNode(str(e.args[0])) from None

    def _live(self, node_id: int) -> tuple[Node, psutil.Process]:
        node = self._node(node_id)
        p = self.process(node)
        if p is None:
            raise KafkalabError(f"{node.name} is not running (see `kafkalab status`)")
        return node, p

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id``: a crash, no controlled shutdown. Returns once it is gone."""
        node, p = self._live(node_id)
        p.kill()
        if not _wait_gone(p, 10, node.ports.values()):
            raise KafkalabError(f"{node.name} (pid {p.pid}) survived SIGKILL for 10 s")

    def stop(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM node ``node_id`` and wait for its controlled shutdown (SIGKILL after ``timeout_s``)."""
        node, _ = self._live(node_id)
        self._stop(node, timeout_s)

    def start(self, node_id: int, timeout_s: float = UP_TIMEOUT_S) -> NodeStatus:
        """Start node ``node_id`` if it is down and wait until it serves (a broker: registered)."""
        node = self._node(node_id)
        p = self.process(node)
        if p is not None:
            if p.status() == psutil.STATUS_STOPPED:
                p.resume()
        else:
            java, classpath = java_executable(), broker_classpath()
            self._prepare(node)
            check_ports_free(node)
            self._format_all([node], java, classpath)
            self._spawn(node, java, classpath)
        self._wait_serving([node], timeout_s)
        return self._node_status(node)

    def start_many(self, node_ids: list[int], timeout_s: float = UP_TIMEOUT_S) -> None:
        """``start`` for several nodes side by side: every one that is down is spawned (a paused
        one resumed) before the one wait until all of them serve, so two restarts cost about
        one (``up`` starts the whole cluster this way). Raises as ``start`` (PortInUse,
        NodeFailedToStart, WaitTimeout)."""
        nodes = [self._node(i) for i in node_ids]
        down = []
        for node in nodes:
            p = self.process(node)
            if p is None:
                down.append(node)
            elif p.status() == psutil.STATUS_STOPPED:
                p.resume()
        if down:
            java, classpath = java_executable(), broker_classpath()
            for node in down:
                self._prepare(node)
                check_ports_free(node)
            self._format_all(down, java, classpath)
            spawned = {node.node_id: self._spawn(node, java, classpath) for node in down}
        if nodes:
            self._wait_serving(nodes, timeout_s)
        if down and not cds.use_flags("node", java, classpath):
            # no class archive yet for this java and these jars (kafkalab.cds, shared by every
            # state folder): write it from a broker that serves, for every later start
            broker = next((n for n in down if n.role == "broker"), None)
            if broker is not None:
                cds.dump_running(spawned[broker.node_id].pid, "node", java, classpath)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: its sockets stay open, it answers nothing, sends no heartbeat."""
        node, p = self._live(node_id)
        p.suspend()
        # the signal is delivered asynchronously: return once the kernel shows it stopped
        wait_until(lambda: p.status() == psutil.STATUS_STOPPED, timeout_s=10, interval_s=0.02,
                   what=f"{node.name} (pid {p.pid}) to stop on SIGSTOP")

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node; returns once it runs again."""
        node, p = self._live(node_id)
        p.resume()
        wait_until(lambda: p.status() != psutil.STATUS_STOPPED, timeout_s=10, interval_s=0.02,
                   what=f"{node.name} (pid {p.pid}) to run again on SIGCONT")

    def logs(self, node_id: int, lines: int = 40) -> str:
        """The node's last log lines."""
        return last_log_lines(self._node(node_id), lines)

    def wipe(self) -> None:
        """Delete all node data and logs (the cluster must be down)."""
        if any(self.process(n) for n in self.topology.nodes):
            raise KafkalabError("the cluster is running; `kafkalab down` first")
        shutil.rmtree(config.cluster_dir(), ignore_errors=True)


class PreparedCluster(LocalCluster):
    """The local backend's processes, started from ``server.properties`` files prepared
    elsewhere instead of rendered from kafka/config: each node's file must already be at
    ``Node.config_path``. Storage is formatted as by LocalCluster (``kafka-storage format``)
    unless it already is. tests/test_compose_image.py boots the files the apache/kafka image's
    ``KafkaDockerWrapper`` renders from docker-compose.yml this way.
    """

    backend = "local (prepared properties)"

    def _prepare(self, node: Node) -> None:
        if not node.config_path.exists():
            raise NodeFailedToStart(f"{node.name} has no {node.config_path}: a PreparedCluster starts from given files")
        node.log_dir.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)
