"""docker-compose.yml, the compose backend's commands, and environment.yml.

Pure unit tests, no Docker engine: the compose files are parsed and merged the way
``docker compose`` does (tests/compose_files.py), and the compose backend's ``docker`` command
lines are read from a stand-in ``docker`` script on PATH that records its arguments (and
answers as an engine would, or as a missing engine, Compose v1 or a missing image would), and
kafka/docker/engine.sh runs with stand-in commands. The containers themselves run in
tests/test_compose_live.py (``make compose-smoke``). What the
image renders from each service's environment is checked with the image's own code in
tests/test_compose_image.py. The sources of truth are ``kafkalab.config`` (topology, ports,
versions, cluster id, heaps) and ``kafka/config/{broker,controller}.properties``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from packaging.specifiers import SpecifierSet

from compose_files import (
    COMPOSE, THREE_CONTROLLERS, bind_mounts, compose_model, compose_services, interpolate, listeners, load_yaml,
    nodes_with_services, published,
)
from kafkalab import cli, cluster, config
from kafkalab.config import Topology
from kafkalab.errors import DockerUnavailable, ImageMissing, KafkalabError

# The compose backend and kafka/docker/engine.sh run, against stand-ins for docker, compose and go
# (shell scripts): processes, but no engine, no JVM.
pytestmark = pytest.mark.subprocess

ROOT = config.repo_root()
ENVIRONMENT = ROOT / "environment.yml"
PYPROJECT = ROOT / "pyproject.toml"

#: The Java the project targets: Kafka 4 brokers and Spark 4 need 17+; both run on 17 and 21.
JAVA_SPEC = ">=17,<22"
#: The Pythons the project targets (pyproject.toml requires-python).
PYTHON_MINORS = ("3.11", "3.12", "3.13")

TOPOLOGIES = pytest.mark.parametrize("controllers", [1, 3], ids=["1-controller", "3-controllers"])


# ----------------------------------------------------------------------------- docker-compose.yml


def test_yaml_files_parse_to_mappings():
    for path in (COMPOSE, THREE_CONTROLLERS, ENVIRONMENT):
        assert isinstance(load_yaml(path), dict), f"{path.name} should be a YAML mapping"


@TOPOLOGIES
def test_services_are_exactly_the_topology_nodes(controllers):
    services = compose_services(controllers)
    expected = {n.name for n in Topology(controllers).nodes}
    assert set(services) == expected, (
        f"with {controllers} controller(s) compose should run {sorted(expected)}, not {sorted(services)}"
    )


def test_three_controllers_need_only_the_override_file_not_a_profile():
    for path in (COMPOSE, THREE_CONTROLLERS):
        for name, service in load_yaml(path)["services"].items():
            if name == "lab":
                continue  # the lab is no node (tests/test_lab_image.py)
            assert "profiles" not in service, (
                f"{name} in {path.name} has a profile: a profile cannot change the voters, "
                "so the 3-controller cluster is switched by the override file alone"
            )


@TOPOLOGIES
def test_every_node_runs_the_official_image_at_the_pinned_kafka_version(controllers):
    for node, service in nodes_with_services(controllers):
        assert service["image"] == f"apache/kafka:{config.KAFKA_VERSION}" == cluster.OFFICIAL_IMAGE, (
            f"{node.name} should run apache/kafka:{config.KAFKA_VERSION} (config.KAFKA_VERSION), "
            f"not {service['image']}"
        )
    for node, service in nodes_with_services(controllers, {"KAFKALAB_IMAGE": "kafkalab/kafka:x"}):
        assert service["image"] == "kafkalab/kafka:x", f"{node.name}: KAFKALAB_IMAGE should replace the image"


@TOPOLOGIES
def test_environment_values_are_strings(controllers):
    for node, service in nodes_with_services(controllers):
        for name, value in service["environment"].items():
            assert isinstance(value, str), f"{node.name}: {name} should be a quoted string, YAML read {value!r}"


@TOPOLOGIES
def test_every_node_has_its_node_name_as_hostname(controllers):
    # the voters and the INTERNAL listeners name the containers by these host names
    for node, service in nodes_with_services(controllers):
        assert service.get("hostname") == node.name, f"{node.name} should have hostname {node.name}"


@TOPOLOGIES
def test_every_node_shares_the_cluster_id(controllers):
    for node, service in nodes_with_services(controllers):
        assert service["environment"].get("CLUSTER_ID") == config.CLUSTER_ID, (
            f"{node.name} should format its storage with CLUSTER_ID {config.CLUSTER_ID}"
        )


@TOPOLOGIES
def test_published_ports_are_client_fault_and_tls_ports_on_localhost_only(controllers):
    for node, service in nodes_with_services(controllers):
        ports = published(service)
        for host_ip, host_port, _ in ports:
            assert host_ip == "127.0.0.1", f"{node.name} publishes {host_port} beyond 127.0.0.1"
        if node.role == "broker":
            wanted = {node.client_port, node.ports["FAULT"], node.ports["TLS"]}
            assert {(h, c) for _, h, c in ports} == {(p, p) for p in wanted}, (
                f"{node.name} should publish CLIENT {node.client_port}, FAULT {node.ports['FAULT']} and TLS "
                f"{node.ports['TLS']} on the same host ports, not {ports}"
            )
        else:
            assert ports == [], f"{node.name} should publish nothing: only brokers talk to controllers"


@TOPOLOGIES
def test_each_node_bind_mounts_its_local_data_folder_at_the_image_data_dir(controllers):
    # the readers of broker files (kafkalab.segments, kafka-dump-log) use Node.data_dir on both backends
    for node, service in nodes_with_services(controllers):
        assert service["environment"]["KAFKA_LOG_DIRS"] == cluster.CONTAINER_DATA_DIR, (
            f"{node.name} should keep its log in the image's volume {cluster.CONTAINER_DATA_DIR}"
        )
    for node, service in nodes_with_services(controllers, env=None):  # as written: the variable is the point
        relative = node.data_dir.relative_to(config.state_dir())
        expected = {cluster.CONTAINER_DATA_DIR: f"${{KAFKALAB_STATE:-./.kafkalab}}/{relative.as_posix()}"}
        if node.role == "broker":  # and the TLS listener's keystore, made by `kafkalab up` (config.tls_dir)
            tls = config.tls_dir().relative_to(config.state_dir())
            expected[cluster.CONTAINER_TLS_DIR] = f"${{KAFKALAB_STATE:-./.kafkalab}}/{tls.as_posix()}"
            location = service["environment"]["KAFKA_LISTENER_NAME_TLS_SSL_KEYSTORE_LOCATION"]
            assert location == f"{cluster.CONTAINER_TLS_DIR}/{config.TLS_KEYSTORE}", location
        assert bind_mounts(service) == expected, (
            f"{node.name} should bind-mount {expected}, not {bind_mounts(service)}"
        )


@TOPOLOGIES
def test_heap_matches_config(controllers):
    for node, service in nodes_with_services(controllers):
        opts = service["environment"].get("KAFKA_HEAP_OPTS", "")
        sizes = dict(re.findall(r"-Xm([sx])(\d+)m", opts))
        assert sizes == {"s": str(node.heap_mb), "x": str(node.heap_mb)}, (
            f"{node.name} should run with -Xms{node.heap_mb}m -Xmx{node.heap_mb}m, not {opts!r}"
        )


@TOPOLOGIES
def test_jvm_flags_match_the_local_backend(controllers):
    for node, service in nodes_with_services(controllers):
        opts = service["environment"].get("KAFKA_JVM_PERFORMANCE_OPTS", "")
        assert opts.split() == cluster.JVM_PERFORMANCE_OPTS, (
            f"{node.name} should run with cluster.JVM_PERFORMANCE_OPTS {cluster.JVM_PERFORMANCE_OPTS}, not {opts!r}"
        )


@TOPOLOGIES
def test_nodes_never_restart_by_themselves(controllers):
    # A fault demo kills a broker; it must stay down until the demo starts it again.
    for node, service in nodes_with_services(controllers):
        assert service.get("restart", "no") == "no", f"{node.name} should have no restart policy"


@TOPOLOGIES
def test_brokers_start_after_every_controller(controllers):
    services = compose_services(controllers)
    names = {n.name for n in Topology(controllers).controller_nodes}
    for node in Topology(controllers).brokers:
        depends = services[node.name].get("depends_on", [])
        depends = set(depends) if isinstance(depends, list) else set(depends)
        assert names <= depends, f"{node.name} should depend on {sorted(names)}"


# ----------------------------------------------------------------------------- choosing the backend

FAKE_DOCKER = r"""#!/bin/sh
# A stand-in for the docker CLI: records each call (state folder, tab, arguments each ended by
# \037); answers `info` as a running engine (unless $FAKE_DOCKER_NO_ENGINE; `info --format {{json .}}`
# with $FAKE_DOCKER_INFO when set), `compose version`
# with $FAKE_DOCKER_COMPOSE_VERSION (default 2.40.3; "none": no plugin), `image inspect` (unless
# $FAKE_DOCKER_NO_IMAGE); prints $FAKE_DOCKER_PS for `ps`, $FAKE_DOCKER_LOGS for `logs` and
# $FAKE_DOCKER_LIBS for `exec`; start, unpause, kill, stop and pause change the state `ps` prints.
{ printf '%s\t' "$KAFKALAB_STATE"; for a in "$@"; do printf '%s\037' "$a"; done; echo; } >> "$FAKE_DOCKER_LOG"
case "$*" in
  info*) [ -n "$FAKE_DOCKER_NO_ENGINE" ] && { echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1; }
         case "$*" in *"{{json .}}"*) [ -n "$FAKE_DOCKER_INFO" ] && { printf '%s\n' "$FAKE_DOCKER_INFO"; exit 0; } ;; esac
         echo "20.10.24"; exit 0 ;;
  "compose version"*) v=${FAKE_DOCKER_COMPOSE_VERSION:-2.40.3}
         [ "$v" = none ] && { echo "docker: 'compose' is not a docker command." >&2; exit 1; }
         echo "$v"; exit 0 ;;
  inspect*) [ -n "$FAKE_DOCKER_INSPECT" ] && printf '%s\n' "$FAKE_DOCKER_INSPECT"; exit 0 ;;
  "image inspect"*) [ -n "$FAKE_DOCKER_NO_IMAGE" ] && { echo "Error: No such image" >&2; exit 1; }; echo sha256:0; exit 0 ;;
  pull*) echo "Error response from daemon: Get https://registry-1.docker.io/v2/: dial tcp: lookup registry-1.docker.io: no such host" >&2; exit 1 ;;
  ps*|*" ps "*) [ -f "$FAKE_DOCKER_PS" ] && cat "$FAKE_DOCKER_PS" ;;
  *" logs "*) [ -f "$FAKE_DOCKER_LOGS" ] && cat "$FAKE_DOCKER_LOGS" ;;
  *" exec "*) [ -n "$FAKE_DOCKER_LIBS" ] && printf '%s\n' $FAKE_DOCKER_LIBS ;;
  *" up "*) [ -n "$FAKE_DOCKER_FAIL_UP" ] && exit 1 ;;
  *" start "*|*" unpause "*|*" kill "*|*" stop "*|*" pause "*)  # the last service named changes state
    for svc; do :; done
    case "$*" in *" start "*|*" unpause "*) st=running ;; *" pause "*) st=paused ;; *) st=exited ;; esac
    [ -f "$FAKE_DOCKER_PS" ] && sed -i "s/\"Service\": \"$svc\", \"State\": \"[a-z]*\"/\"Service\": \"$svc\", \"State\": \"$st\"/" "$FAKE_DOCKER_PS" ;;
esac
exit 0
"""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A ``docker`` on PATH that answers ``info`` (as a running engine would) and records every
    call; a fresh state folder; no backend chosen by the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    log, ps, logs = tmp_path / "docker-calls.log", tmp_path / "ps.json", tmp_path / "logs.txt"
    log.touch()
    logs.write_text("[2026-01-01 00:00:00,000] INFO Kafka Server started (kafka.server.KafkaRaftServer)\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setenv("FAKE_DOCKER_PS", str(ps))
    monkeypatch.setenv("FAKE_DOCKER_LOGS", str(logs))
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("KAFKALAB_DOCKER_WORK", str(tmp_path / "docker-work"))  # no stand-in image built
    monkeypatch.delenv("KAFKALAB_BACKEND", raising=False)
    monkeypatch.delenv("KAFKALAB_IMAGE", raising=False)

    def calls() -> list[tuple[str, list[str]]]:
        out = []
        for line in log.read_text().splitlines():
            state, _, args = line.partition("\t")
            out.append((state, args.split("\x1f")[:-1]))
        return out

    def set_states(states: dict[str, str]) -> None:
        ps.write_text("".join(json.dumps({"Service": s, "State": st}) + "\n" for s, st in states.items()))

    return {"calls": calls, "set_states": set_states, "tmp": tmp_path}


@pytest.mark.jvm
def test_a_docker_that_answers_info_does_not_make_compose_the_default(fake_docker, monkeypatch):
    assert subprocess.run(["docker", "info"]).returncode == 0, "the stand-in docker answers info"
    empty = fake_docker["tmp"] / "no-jars"
    empty.mkdir()
    monkeypatch.setenv("KAFKALAB_JARS", str(empty))  # the local backend stops at its first step
    assert cluster.chosen_backend() == "local"
    result = CliRunner().invoke(cli.main, ["up"])
    assert result.exit_code == 1 and "make jars" in result.output, (
        f"`kafkalab up` with no flag should take the local path (which needs the jars): {result.output}"
    )
    assert [args for _, args in fake_docker["calls"]()] == [["info"]], "kafkalab up should not call docker at all"


def test_compose_only_when_asked(fake_docker, monkeypatch):
    assert isinstance(cluster.cluster(), cluster.LocalCluster) and not isinstance(cluster.cluster(), cluster.ComposeCluster)
    assert isinstance(cluster.cluster("compose"), cluster.ComposeCluster)
    monkeypatch.setenv("KAFKALAB_BACKEND", "compose")
    assert isinstance(cluster.cluster(), cluster.ComposeCluster)
    assert cluster.chosen_backend("local") == "local", "--backend wins over $KAFKALAB_BACKEND"
    with pytest.raises(KafkalabError, match="choose local or compose"):
        cluster.chosen_backend("auto")


def test_status_names_the_backend_in_text_and_json(fake_docker, monkeypatch):
    for backend in ("local", "compose"):
        monkeypatch.setenv("KAFKALAB_BACKEND", backend)
        fake_docker["set_states"]({"controller-101": "running", "broker-1": "running", "broker-2": "paused"})
        quorum = config.Node(101, "controller").data_dir / "__cluster_metadata-0"
        quorum.mkdir(parents=True, exist_ok=True)
        (quorum / "quorum-state").write_text(json.dumps({"leaderId": 101, "leaderEpoch": 3}))
        text = CliRunner().invoke(cli.main, ["status"])
        assert text.exit_code == 0 and f"backend: {backend}" in text.output, text.output
        st = json.loads(CliRunner().invoke(cli.main, ["status", "--json"]).output)
        assert st["backend"] == backend
        if backend == "compose":
            assert st["quorum_leader"] == 101, "read from the running controller's bind-mounted quorum-state"
            b1, b2, b3 = (st["brokers"][str(i)] for i in (1, 2, 3))
            assert b1["alive"] and not b1["paused"] and b2["paused"] and not b3["alive"]
            assert b1["data_dir"] == str(config.Node(1, "broker").data_dir), (
                "on compose a broker's data folder is its bind mount, the same path as on the local backend"
            )


# ----------------------------------------------------------------------------- the compose backend's commands


def test_node_operations_map_to_docker_compose_commands(fake_docker):
    c = cluster.ComposeCluster(Topology(1))
    files = ["compose", "-f", str(COMPOSE)]
    fake_docker["set_states"]({"broker-2": "exited", "controller-101": "exited"})
    quorum = config.Node(101, "controller").data_dir / "__cluster_metadata-0"
    quorum.mkdir(parents=True)
    c.kill(2)
    c.stop(2)
    # a controller serves once the new process rewrote its quorum-state naming a leader (KIP-595)
    (quorum / "quorum-state").write_text(json.dumps({"leaderId": 101, "leaderEpoch": 4}))
    c.start(101)
    c.pause(1)
    c.resume(1)
    c.logs(3, lines=7)
    ops = [args for _, args in fake_docker["calls"]() if "ps" not in args]
    assert ops == [
        files + ["kill", "-s", "SIGKILL", "broker-2"],
        files + ["stop", "--timeout", str(int(cluster.STOP_TIMEOUT_S)), "broker-2"],
        files + ["start", "controller-101"],
        files + ["pause", "broker-1"],
        files + ["unpause", "broker-1"],
        files + ["logs", "--no-color", "--tail", "7", "broker-3"],
    ], "readiness is asked of Kafka (quorum-state, Metadata), never read from `docker compose logs`"
    states = {state for state, _ in fake_docker["calls"]()}
    assert states == {str(config.state_dir())}, "compose should bind-mount the data of this state folder"


def test_a_controller_is_not_ready_on_a_quorum_state_older_than_its_start(fake_docker):
    c = cluster.ComposeCluster(Topology(1))
    node = c.topology.node(101)
    f = node.data_dir / "__cluster_metadata-0" / "quorum-state"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"leaderId": 101, "leaderEpoch": 3}))
    os.utime(f, (1000.0, 1000.0))
    assert not c.controller_serves(node, since=2000.0), "the old process's file says nothing about the new one"
    assert c.controller_serves(node, since=500.0)
    f.write_text(json.dumps({"leaderId": -1, "leaderEpoch": 4}))
    assert not c.controller_serves(node, since=0.0), "no leader yet"


def test_a_paused_node_is_unpaused_before_stop_and_down(fake_docker):
    c = cluster.ComposeCluster(Topology(1))
    fake_docker["set_states"]({"broker-2": "paused", "broker-3": "paused", "broker-1": "running"})
    c.stop(2)
    c.down()
    ops = [args[3:] for _, args in fake_docker["calls"]() if "ps" not in args]
    assert ops == [
        ["unpause", "broker-2"],
        ["stop", "--timeout", str(int(cluster.STOP_TIMEOUT_S)), "broker-2"],
        ["unpause", "broker-3"],
        ["down", "-v", "--remove-orphans", "--timeout", str(int(cluster.STOP_TIMEOUT_S))],
    ], "a frozen JVM cannot handle SIGTERM: it is unpaused first"


def test_three_controllers_add_the_override_file(fake_docker):
    cmd = cluster.ComposeCluster(Topology(3)).compose_command("ps")
    assert cmd[1:] == ["compose", "-f", str(COMPOSE), "-f", str(THREE_CONTROLLERS), "ps"]


def test_wipe_deletes_the_data_from_inside_each_container(fake_docker):
    c = cluster.ComposeCluster(Topology(1))
    for n in c.topology.nodes:
        n.data_dir.mkdir(parents=True)
    fake_docker["set_states"]({n.name: "exited" for n in c.topology.nodes})
    c.wipe()
    runs = [args for _, args in fake_docker["calls"]() if "run" in args]
    assert [r[r.index("sh") + 1] for r in runs] == [n.name for n in c.topology.nodes]
    assert all(r[-2:] == ["-c", f"rm -rf {cluster.CONTAINER_DATA_DIR}/* {cluster.CONTAINER_DATA_DIR}/.[!.]*"]
               for r in runs)
    assert not config.cluster_dir().exists()


@pytest.mark.jvm
def test_changing_the_controller_count_wipes_the_old_quorum_first(fake_docker, monkeypatch):
    one = cluster.ComposeCluster(Topology(1))
    config.cluster_dir().mkdir(parents=True)
    one._topology_file().write_text(json.dumps(Topology(1).to_json()))
    for n in one.topology.nodes:
        n.data_dir.mkdir(parents=True)
    fake_docker["set_states"]({n.name: "exited" for n in one.topology.nodes})
    monkeypatch.setenv("FAKE_DOCKER_FAIL_UP", "1")  # stop before waiting for brokers
    with pytest.raises(KafkalabError, match="docker compose up"):
        cluster.ComposeCluster().up(controllers=3)
    # the compose operations (not the engine checks, `docker info`, `compose version`, `image inspect`)
    ops = [args for _, args in fake_docker["calls"]() if args[0] == "compose" and args[-1] != "--short"]
    assert [a[3] for a in ops[:4]] == ["run"] * 4, "the 1-controller data is wiped (from 4 containers) first"
    assert ops[-1][:6] == ["compose", "-f", str(COMPOSE), "-f", str(THREE_CONTROLLERS), "up"]


def test_up_on_the_other_backend_refuses_while_the_cluster_runs(fake_docker):
    config.cluster_dir().mkdir(parents=True)
    (config.cluster_dir() / "backend").write_text("compose")
    fake_docker["set_states"]({"broker-1": "running"})
    with pytest.raises(KafkalabError, match="runs on the compose backend: `kafkalab down` first"):
        cluster.up(backend="local")


def _compose_env_at(monkeypatch: pytest.MonkeyPatch, base: int, state: Path) -> dict[str, str]:
    monkeypatch.setenv("KAFKALAB_PORT_BASE", str(base))
    monkeypatch.setenv("KAFKALAB_STATE", str(state))
    return cluster.ComposeCluster.compose_environment()


@TOPOLOGIES
def test_the_ports_follow_the_port_base_published_and_advertised(controllers, fake_docker, monkeypatch):
    env = _compose_env_at(monkeypatch, 27092, fake_docker["tmp"] / "other-state")
    topology = Topology(controllers)
    model = compose_model(controllers, env)
    assert model["name"] == "kafkalab-27092", "a project of its own: containers and network apart from 9092's"
    for node, service in nodes_with_services(controllers, env):
        ports = {(ip, h, c) for ip, h, c in published(service)}
        if node.role == "controller":
            assert ports == set()
            continue
        local = topology.node(node.node_id)
        inside = config.Node(node.node_id, "broker")  # the container's own ports: the default plan
        with monkeypatch.context() as m:
            m.delenv("KAFKALAB_PORT_BASE")
            inside_ports = (inside.client_port, inside.ports["FAULT"], inside.ports["TLS"])
        assert ports == {("127.0.0.1", local.client_port, inside_ports[0]), ("127.0.0.1", local.ports["FAULT"], inside_ports[1]),
                         ("127.0.0.1", local.ports["TLS"], inside_ports[2])}, (
            f"{node.name} should publish this base's CLIENT, FAULT and TLS ports, not {ports}"
        )
        advertised = listeners(service["environment"]["KAFKA_ADVERTISED_LISTENERS"])
        assert advertised["CLIENT"] == ("127.0.0.1", local.client_port)
        assert advertised["FAULT"] == ("127.0.0.1", local.fault_proxy_port), "the fault proxy of this base"
        assert advertised["TLS"] == ("127.0.0.1", local.ports["TLS"])
        mounts = bind_mounts(service)
        assert mounts[cluster.CONTAINER_DATA_DIR] == str(local.data_dir), "this state folder's data"
    assert topology.bootstrap_servers == ",".join(
        f"127.0.0.1:{p}" for p in (27092, 27192, 27292)), "clients bootstrap from the published ports"


def test_two_compose_clusters_share_no_name_and_no_host_port(fake_docker, monkeypatch):
    def host_ports(env: dict[str, str]) -> set[int]:
        return {h for _, service in nodes_with_services(1, env) for _, h, _ in published(service)}

    a = _compose_env_at(monkeypatch, 9092, fake_docker["tmp"] / "a")
    b = _compose_env_at(monkeypatch, 27092, fake_docker["tmp"] / "b")
    assert a["KAFKALAB_PROJECT"] == "kafkalab" == compose_model(1, {})["name"], "the default base keeps the file's name"
    assert b["KAFKALAB_PROJECT"] != a["KAFKALAB_PROJECT"]
    assert not host_ports(a) & host_ports(b)
    assert host_ports(a) == host_ports({}), "at the default base kafkalab runs exactly the file a user runs by hand"


def test_the_compose_environment_names_the_image_built_here(fake_docker, monkeypatch):
    assert "KAFKALAB_IMAGE" not in cluster.ComposeCluster.compose_environment(), "none built: the official image"
    assert cluster.ComposeCluster().image() == cluster.OFFICIAL_IMAGE
    work = fake_docker["tmp"] / "docker-work"
    work.mkdir()
    (work / "image").write_text("kafkalab/kafka:4.3.1-0123456789ab\n")
    assert cluster.local_image() == "kafkalab/kafka:4.3.1-0123456789ab"
    assert cluster.ComposeCluster().image() == "kafkalab/kafka:4.3.1-0123456789ab"
    monkeypatch.setenv("KAFKALAB_IMAGE", "mine:1")
    assert cluster.ComposeCluster().image() == "mine:1", "a user's KAFKALAB_IMAGE wins"


def test_interpolation_follows_the_compose_specification():
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("${SET:-d}/${UNSET:-d}/${EMPTY:-d}/${EMPTY-d}/${UNSET-d}/${SET}/$$", env) == "x/d/d//d/x/$"
    assert interpolate({"a": ["${SET}"], "b": 1}, env) == {"a": ["x"], "b": 1}


# ----------------------------------------------------------------------------- bad states


def test_no_engine_is_a_clear_error_within_seconds_naming_how_to_start_it(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_NO_ENGINE", "1")
    t0 = time.monotonic()
    with pytest.raises(DockerUnavailable, match=r"no Docker engine answers.*(systemctl start docker|make compose-setup)"):
        cluster.ComposeCluster(Topology(1)).up()
    assert time.monotonic() - t0 < 5 + cluster.DOCKER_ASK_TIMEOUT_S, "reported at once, not after a timeout"
    assert not [a for _, a in fake_docker["calls"]() if a[:1] == ["compose"] and "up" in a], "nothing started"


def test_no_docker_command_names_how_to_get_one(fake_docker, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_docker["tmp"] / "empty-bin"))
    with pytest.raises(DockerUnavailable, match="Docker Desktop"):
        cluster.ComposeCluster(Topology(1)).up()


@pytest.mark.parametrize("version", ["none", "1.29.2"])
def test_compose_v1_only_is_a_clear_error_naming_the_version_needed(fake_docker, monkeypatch, version):
    monkeypatch.setenv("FAKE_DOCKER_COMPOSE_VERSION", version)
    v1 = fake_docker["tmp"] / "bin" / "docker-compose"
    v1.write_text("#!/bin/sh\necho 'docker-compose version 1.29.2'\n")
    v1.chmod(0o755)
    with pytest.raises(DockerUnavailable, match=r"needs Compose 2\.20 or newer \(`docker compose`; v5 too\), found only Compose v1"):
        cluster.ComposeCluster(Topology(1)).up()
    assert not [a for _, a in fake_docker["calls"]() if a[:1] == ["compose"] and "up" in a], "nothing started"


@pytest.mark.parametrize("version", ["2.19.1", "v2.19.0", "2.3.3"])
def test_compose_older_than_2_20_is_refused_naming_the_version_found(fake_docker, monkeypatch, version):
    monkeypatch.setenv("FAKE_DOCKER_COMPOSE_VERSION", version)
    with pytest.raises(DockerUnavailable, match=rf"needs Compose 2\.20 or newer .*found Compose {version} "):
        cluster.ComposeCluster(Topology(1)).up()
    assert not [a for _, a in fake_docker["calls"]() if a[:1] == ["compose"] and "up" in a], "nothing started"


@pytest.mark.parametrize("version", ["2.20.0", "v2.40.3", "5.7.1", "5.0.0-desktop.1", "2.24.6-desktop.1"])
def test_compose_2_20_and_newer_v5_included_is_accepted(fake_docker, monkeypatch, version):
    monkeypatch.setenv("FAKE_DOCKER_COMPOSE_VERSION", version)
    cluster.ComposeCluster(Topology(1)).check_engine()  # raises if refused
    probes = [a for _, a in fake_docker["calls"]() if a[:1] == ["compose"]]
    assert probes == [["compose", "version", "--short"]], "asked of `docker compose`, no build of its own here"


def test_compose_version_reads_the_short_version():
    assert cluster.compose_version("2.40.3\n") == (2, 40)
    assert cluster.compose_version("v2.40.3") == (2, 40)
    assert cluster.compose_version("5.7.1") == (5, 7)
    assert cluster.compose_version("5.0.0-desktop.1") == (5, 0), "Docker Desktop's builds carry a suffix"
    assert cluster.compose_version("2.20") == (2, 20)
    assert cluster.compose_version("1.29.2") == (1, 29)
    assert cluster.compose_version("Usage:  docker [OPTIONS] COMMAND") is None
    assert cluster.compose_version("") is None
    accepted = {v: cluster.compose_version_accepted(v)
                for v in ("2.20.0", "v2.40.3", "5.7.1", "5.0.0-desktop.1", "10.0.0", "2.19.9", "1.29.2", "2.9.0", "")}
    assert accepted == {"2.20.0": True, "v2.40.3": True, "5.7.1": True, "5.0.0-desktop.1": True, "10.0.0": True,
                        "2.19.9": False, "1.29.2": False, "2.9.0": False, "": False}, "2.9 is older than 2.20, not newer"


def test_the_backend_runs_kafkalabs_own_compose_when_engine_sh_built_one(fake_docker):
    own = cluster.own_compose()
    assert own == fake_docker["tmp"] / "docker-work" / "cli-plugins" / "docker-compose"
    c = cluster.ComposeCluster(Topology(1))
    assert c.compose_command("ps")[:2] == [shutil.which("docker"), "compose"], "none built: docker compose"
    own.parent.mkdir(parents=True)
    own.write_text("#!/bin/sh\necho \"$*\" >> \"$FAKE_DOCKER_LOG.own\"\n[ \"$1\" = version ] && echo 5.7.1\nexit 0\n")
    own.chmod(0o755)
    assert c.compose_command("ps") == [str(own), "-f", str(COMPOSE), "ps"], "standalone, the user's plugin untouched"
    c.check_engine()
    assert Path(os.environ["FAKE_DOCKER_LOG"] + ".own").read_text().splitlines() == ["version --short"]
    assert not [a for _, a in fake_docker["calls"]() if a[:1] == ["compose"]], "the user's docker compose not asked"


def test_a_missing_local_image_names_the_build_command(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_NO_IMAGE", "1")
    monkeypatch.setenv("KAFKALAB_IMAGE", "kafkalab/kafka:4.3.1-0123456789ab")
    with pytest.raises(ImageMissing, match="make compose-image"):
        cluster.ComposeCluster(Topology(1)).up()
    assert not [a for _, a in fake_docker["calls"]() if a[:1] == ["compose"] and "up" in a], "nothing started"


def test_a_missing_official_image_that_cannot_be_pulled_names_both_ways(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_NO_IMAGE", "1")
    with pytest.raises(ImageMissing, match=r"docker pull apache/kafka:.*make compose-image"):
        cluster.ComposeCluster(Topology(1)).up()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host pids of containers: Linux engines only")
def test_status_gives_the_host_pid_of_each_container_jvm_and_nothing_else(fake_docker, monkeypatch):
    # a stand-in for a container's JVM: a process with kafka.Kafka on its command line
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "kafka.Kafka"])
    try:
        fake_docker["tmp"].joinpath("ps.json").write_text(
            json.dumps({"Service": "broker-1", "State": "running", "ID": "a1"}) + "\n"
            + json.dumps({"Service": "broker-2", "State": "running", "ID": "b2"}) + "\n")
        monkeypatch.setenv("FAKE_DOCKER_INSPECT", f"broker-1 {jvm.pid}\nbroker-2 {os.getpid()}")
        st = cluster.ComposeCluster(Topology(1)).status()
        assert st.brokers[1].pid == jvm.pid, "the container's JVM, as the host sees it (strace, /proc/<pid>/io)"
        assert st.brokers[2].pid is None, "a pid whose process is not kafka.Kafka is not given"
        inspects = [a for _, a in fake_docker["calls"]() if a[:1] == ["inspect"]]
        assert inspects and inspects[-1][-2:] == ["a1", "b2"], inspects
    finally:
        jvm.kill()
        jvm.wait()


# ----------------------------------------------------------------------------- versions from the image


def test_the_kafka_version_is_read_from_the_core_jar_of_the_libs_folder():
    libs = ["kafka-clients-4.3.1.jar", "kafka_2.13-4.3.1.jar", "kafka-tools-4.3.1.jar", "scala-library-2.13.16.jar"]
    assert cluster.kafka_version_from_jars(libs) == "4.3.1"
    assert cluster.kafka_version_from_jars(["kafka_2.13-4.3.1.jar\n", "kafka_2.13-4.3.1-test.jar"]) == "4.3.1"
    with pytest.raises(KafkalabError, match="found none"):
        cluster.kafka_version_from_jars(["kafka-clients-4.3.1.jar"])
    with pytest.raises(KafkalabError, match="4.2.0"):
        cluster.kafka_version_from_jars(["kafka_2.13-4.3.1.jar", "kafka_2.13-4.2.0.jar"])


def test_versions_on_compose_ask_each_broker_container_not_a_log(fake_docker, monkeypatch):
    from kafkalab import versions

    monkeypatch.setenv("FAKE_DOCKER_LIBS", "kafka-clients-4.3.1.jar kafka_2.13-4.3.1.jar")
    fake_docker["set_states"]({f"broker-{i}": "running" for i in config.BROKER_IDS})
    st = cluster.ComposeCluster(Topology(1)).status()
    assert versions.broker_versions(st) == {i: "4.3.1" for i in config.BROKER_IDS}
    execs = [a[a.index("exec"):] for _, a in fake_docker["calls"]() if "exec" in a]
    assert execs == [["exec", "-T", f"broker-{i}", "ls", "-1", cluster.CONTAINER_LIBS_DIR] for i in config.BROKER_IDS]


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.getuid() == cluster.CONTAINER_UID,
                    reason="needs Linux bind-mount ownership and a uid other than the image's 1000")
def test_compose_up_refuses_data_the_local_backend_wrote(fake_docker):
    node = config.Node(1, "broker")
    node.data_dir.mkdir(parents=True)
    (node.data_dir / "meta.properties").write_text("node.id=1\n")
    with pytest.raises(KafkalabError, match="kafkalab wipe --yes"):
        cluster.up(backend="compose")
    assert [a for _, a in fake_docker["calls"]() if a[:1] != ["info"]] == [], (
        "nothing is started on data the containers could not write (only the engine was asked how it maps uids)")


#: ``docker info --format '{{json .}}'``, the parts the owner check reads, as engines answer.
ROOTFUL_INFO = {"OperatingSystem": "Debian GNU/Linux 12 (bookworm)",
                "SecurityOptions": ["name=seccomp,profile=builtin", "name=cgroupns"]}
ROOTLESS_INFO = {"OperatingSystem": "Ubuntu 24.04.1 LTS",
                 "SecurityOptions": ["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"]}
USERNS_INFO = {"OperatingSystem": "Debian GNU/Linux 12 (bookworm)",
               "SecurityOptions": ["name=seccomp,profile=builtin", "name=userns"]}
DESKTOP_INFO = {"OperatingSystem": "Docker Desktop", "SecurityOptions": ["name=seccomp,profile=unconfined", "name=cgroupns"]}
SUBUID = "dockremap:165536:65536\nalice:100000:65536\n1001:300000:65536\n"


def test_the_host_uid_of_the_containers_appuser_follows_the_engines_user_namespace():
    assert cluster.container_uid_on_host(ROOTFUL_INFO, 1000, SUBUID, "alice", 1000) == 1000
    assert cluster.container_uid_on_host(ROOTLESS_INFO, 1000, SUBUID, "alice", 1000) == 100999, (
        "rootlesskit maps container uid n >= 1 to subuid start + n - 1")
    assert cluster.container_uid_on_host(ROOTLESS_INFO, 0, SUBUID, "alice", 1000) == 1000, "container root is the user"
    assert cluster.container_uid_on_host(ROOTLESS_INFO, 1000, SUBUID, "bob", 1001) == 300999, "subuid by uid too"
    assert cluster.container_uid_on_host(ROOTLESS_INFO, 1000, "", "carol", 1002) is None, "no subuids: cannot tell"
    assert cluster.container_uid_on_host(USERNS_INFO, 1000, SUBUID, "alice", 1000) == 166536, "userns-remap: dockremap"
    assert cluster.container_uid_on_host(DESKTOP_INFO, 1000, SUBUID, "alice", 1000) is None, (
        "Docker Desktop's file sharing shows the files as the user's own: the owner tells nothing")
    assert cluster.subid_start(SUBUID, "alice", 1000) == 100000 and cluster.subid_start(SUBUID, "x", 5) is None


def _plant_meta(owner: int) -> Path:
    meta = config.Node(1, "broker").data_dir / "meta.properties"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text("node.id=1\n")
    os.chown(meta, owner, owner)
    return meta


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.getuid() != 0,
                    reason="plants files of other owners (chown): root only (CI runs as root)")
@pytest.mark.parametrize("engine, info, writer", [
    ("rootless", ROOTLESS_INFO, 100999), ("userns-remap", USERNS_INFO, 166536), ("rootful", ROOTFUL_INFO, 1000)])
def test_a_second_compose_up_accepts_the_data_its_containers_wrote(fake_docker, monkeypatch, engine, info, writer):
    subuid = fake_docker["tmp"] / "subuid"
    subuid.write_text(SUBUID.replace("alice", "root"))  # this test runs as root: root's subordinate uids
    monkeypatch.setattr(cluster.compose, "SUBUID_FILE", subuid)
    monkeypatch.setenv("FAKE_DOCKER_INFO", json.dumps(info))
    c = cluster.ComposeCluster(Topology(1))
    _plant_meta(writer)  # what the containers wrote, as the host sees it under this engine
    cluster._check_data_owner(c)  # raises if refused
    _plant_meta(4242)  # what another writer (the local backend run by another user) left
    with pytest.raises(KafkalabError, match=rf"belongs to uid 4242 .*writes as uid {writer}: .*kafkalab wipe --yes"):
        cluster._check_data_owner(c)


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.getuid() != 0,
                    reason="plants files of other owners (chown): root only (CI runs as root)")
def test_docker_desktop_never_refuses_on_owners(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_INFO", json.dumps(DESKTOP_INFO))
    for owner in (os.getuid(), 1000, 4242):
        _plant_meta(owner)
        cluster._check_data_owner(cluster.ComposeCluster(Topology(1)))


# ----------------------------------------------------------------------------- environment.yml


def conda_spec(env: dict[str, Any], package: str) -> str | None:
    """Version part of ``package=version`` or ``package>=a,<b`` in the dependencies, as a
    PEP 440 specifier (``=3.11`` gives ``==3.11.*``; None if unversioned or absent)."""
    for dep in env["dependencies"]:
        if isinstance(dep, str):
            match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(\S*)\s*", dep)
            if match and match.group(1) == package and match.group(2):
                spec = match.group(2)
                plain = re.fullmatch(r"==?([0-9][0-9.]*?)(?:\.\*)?", spec)
                return f"=={plain.group(1)}.*" if plain else spec
    return None


def test_environment_yml_python_is_requires_python():
    env = load_yaml(ENVIRONMENT)
    requires = SpecifierSet(tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"])
    python = conda_spec(env, "python")
    assert python is not None, "environment.yml should pin python to requires-python's range"
    pinned = SpecifierSet(python)
    for minor in range(8, 16):
        for patch in ("0", "99"):
            version = f"3.{minor}.{patch}"
            assert pinned.contains(version) == requires.contains(version), (
                f"environment.yml python{python} and requires-python {requires} disagree on {version}"
            )
    assert [m for m in PYTHON_MINORS if requires.contains(f"{m}.0")] == list(PYTHON_MINORS), requires
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in PYTHON_MINORS, (
        f"the tests run on Python {sys.version_info[0]}.{sys.version_info[1]}, the project targets {PYTHON_MINORS}"
    )


def test_environment_yml_openjdk_is_java_17_or_21():
    env = load_yaml(ENVIRONMENT)
    java = conda_spec(env, "openjdk")
    assert java == JAVA_SPEC, (
        f"environment.yml should pin openjdk{JAVA_SPEC} (Kafka 4 and Spark 4 need Java 17+), not {java}"
    )
    assert [v for v in ("11", "17", "21", "25") if SpecifierSet(java).contains(v)] == ["17", "21"]


def test_environment_yml_has_maven_pip_and_installs_the_project_with_its_test_extra():
    env = load_yaml(ENVIRONMENT)
    assert env["name"] == "kafkalab"
    assert env["channels"] == ["conda-forge"], "environment.yml should use conda-forge only"
    plain = {re.split(r"[=<>]", d)[0] for d in env["dependencies"] if isinstance(d, str)}
    assert {"python", "openjdk", "maven", "pip"} <= plain, f"environment.yml lacks {sorted({'maven', 'pip'} - plain)}"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-e .[test]" in pip, "environment.yml should pip-install the project: -e .[test]"
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert "test" in extras, "pyproject.toml should define the [test] extra environment.yml installs"


# ----------------------------------------------------------------------------- kafka/docker/engine.sh

ENGINE = ROOT / "kafka" / "docker" / "engine.sh"


def _stub(folder: Path, name: str, script: str) -> None:
    f = folder / name
    f.write_text("#!/bin/sh\n" + script)
    f.chmod(0o755)


def _run_engine(tmp_path: Path, stubs: dict[str, str], *args: str, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess:
    """engine.sh with ``stubs`` (name -> sh body) first on PATH, then only /usr/bin and /bin
    (no dockerd, apt-get or go from the machine), every call to a stub recorded in calls.log."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        _stub(bin_dir, name, f'echo "{name} $*" >> "{tmp_path}/calls.log"\n{body}')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "KAFKALAB_DOCKER_WORK": str(tmp_path / "work"), **(env or {})}
    return subprocess.run([str(ENGINE), *args], capture_output=True, text=True, env=env, timeout=60)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("version", ["2.20.0", "v2.40.3", "2.29.1", "5.7.1", "5.0.0-desktop.1", "2.24.6-desktop.1"])
def test_engine_installs_nothing_where_docker_compose_2_20_or_newer_answers(tmp_path, version):
    # Docker Desktop (5.x since 2025-12, 2.x before), docker-ce, a distribution's compose plugin
    cp = _run_engine(tmp_path, {"docker": f'case "$*" in info*) exit 0;; "compose version"*) echo {version};; esac',
                                "apt-get": "exit 0", "dockerd": "exit 0", "go": "exit 0"}, "up")
    assert cp.returncode == 0, cp.stderr
    assert [c.split()[0] for c in _calls(tmp_path)] == ["docker", "docker"], "only asked, never installed"
    assert not (tmp_path / "home" / ".docker").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("version, why", [
    ("2.20.0", None), ("v2.40.3", None), ("5.7.1", None), ("5.0.0-desktop.1", None), ("10.1.0", None),
    ("2.19.1", "older than 2.20"), ("v2.9.0", "older than 2.20"), ("1.29.2", "Compose v1"),
    ("", "not a version"), ("docker-compose version 1.29.2", "not a version")])
def test_engine_reads_compose_versions_as_versions(tmp_path, version, why):
    cp = _run_engine(tmp_path, {}, "compose-version-ok", version)
    assert (cp.returncode == 0) == (why is None), (version, cp.stderr)
    if why:
        assert why in cp.stderr, cp.stderr


#: A stand-in ``docker``: an engine that answers; ``docker compose`` is the plugin in
#: ~/.docker/cli-plugins when there is one, else a system plugin answering $SYSTEM_COMPOSE, else none.
DOCKER_WITH_PLUGINS = """case "$*" in
  info*) exit 0 ;;
  "compose version"*) p=$HOME/.docker/cli-plugins/docker-compose
    [ -x "$p" ] && exec "$p" version --short
    [ -n "$SYSTEM_COMPOSE" ] && { echo "$SYSTEM_COMPOSE"; exit 0; }
    echo "docker: 'compose' is not a docker command." >&2; exit 1 ;;
esac"""
#: A stand-in ``go``: ``mod download`` names a module folder whose go.mod needs go $GO_NEEDS
#: (default: this Go's version); ``build -o OUT -ldflags ...Version=vX`` writes an OUT answering
#: ``version --short`` with X, as the real build's -ldflags make it do (or fails with
#: $GO_BUILD_FAILS); GOTOOLCHAIN is recorded.
GO_STAND_IN = """echo "GOTOOLCHAIN=$GOTOOLCHAIN" >> "$STUB_DIR/go-env.log"
case "$1 $2" in
  "env GOVERSION") echo "go${GO_HAS:-1.26.8}" ;;
  "mod download") mkdir -p "$STUB_DIR/module/cmd"; echo "go ${GO_NEEDS:-${GO_HAS:-1.26.8}}" > "$STUB_DIR/module.mod"
    printf '{\n\t"Path": "m",\n\t"Dir": "%s",\n\t"GoMod": "%s",\n}\n' "$STUB_DIR/module" "$STUB_DIR/module.mod" ;;
  build*) [ -n "$GO_BUILD_FAILS" ] && { echo "internal/registry/desktop.go:28:2: 403 Forbidden" >&2; exit 1; }
    out=; ver=; while [ $# -gt 0 ]; do
      case "$1" in -o) out=$2 ;; -ldflags) ver=${2##*internal.Version=v} ;; esac; shift; done
    printf '#!/bin/sh\necho %s\n' "$ver" > "$out"; chmod +x "$out" ;;
esac"""


def _pinned_compose() -> str:
    return re.search(r"^COMPOSE_VERSION=v(\S+)$", ENGINE.read_text(), flags=re.M)[1]


def _plugin_run(tmp_path: Path, system_compose: str = "", **env: str) -> subprocess.CompletedProcess:
    stub_dir = tmp_path / "go-stub"
    stub_dir.mkdir(exist_ok=True)
    return _run_engine(tmp_path, {"docker": DOCKER_WITH_PLUGINS, "go": GO_STAND_IN}, "up",
                       env={"SYSTEM_COMPOSE": system_compose, "STUB_DIR": str(stub_dir), **env})


def test_engine_installs_compose_where_none_answers_and_marks_it_as_kafkalabs(tmp_path):
    v1 = tmp_path / "stub-bin"
    v1.mkdir()
    _stub(v1, "docker-compose", "echo 1.29.2")  # Debian's docker-compose: Compose v1, not accepted
    cp = _plugin_run(tmp_path)
    assert cp.returncode == 0, cp.stderr
    plugin = tmp_path / "home" / ".docker" / "cli-plugins" / "docker-compose"
    assert subprocess.run([plugin, "version", "--short"], capture_output=True, text=True).stdout.strip() == _pinned_compose()
    marker = (plugin.parent / ".kafkalab-docker-compose").read_text()
    assert f"sha256={__import__('hashlib').sha256(plugin.read_bytes()).hexdigest()}" in marker.splitlines(), marker
    assert not (tmp_path / "work" / "cli-plugins").exists(), "where none answers, `docker compose` works for the user too"
    assert not [n for n in os.listdir(plugin.parent) if n.startswith("docker-") and n != "docker-compose"], (
        "the record is not named docker-*: the docker CLI would take it for a plugin")
    again = _plugin_run(tmp_path)
    assert again.returncode == 0 and "building" not in again.stderr, "a second up builds nothing"


@pytest.mark.parametrize("user_plugin", ["2.19.1", "broken"])
def test_engine_never_replaces_a_users_plugin_and_builds_its_own_beside_kafkalab(tmp_path, user_plugin):
    plugins = tmp_path / "home" / ".docker" / "cli-plugins"
    plugins.mkdir(parents=True)
    mine = plugins / "docker-compose"
    mine.write_text(f"#!/bin/sh\necho {user_plugin}\n" if user_plugin != "broken" else "#!/bin/sh\nexit 1\n")
    mine.chmod(0o755)
    before = mine.read_bytes(), mine.stat().st_mtime_ns
    cp = _plugin_run(tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert (mine.read_bytes(), mine.stat().st_mtime_ns) == before, "the user's plugin is left exactly as it was"
    assert not (plugins / ".kafkalab-docker-compose").exists()
    own = tmp_path / "work" / "cli-plugins" / "docker-compose"
    assert subprocess.run([own, "version", "--short"], capture_output=True, text=True).stdout.strip() == _pinned_compose()
    assert "leaving the docker compose you have as it is" in cp.stderr and str(own) in cp.stderr, cp.stderr
    again = _plugin_run(tmp_path)
    assert again.returncode == 0 and "building" not in again.stderr, "its own build is found the second time"


def test_engine_leaves_a_users_dangling_plugin_link_alone(tmp_path):
    plugins = tmp_path / "home" / ".docker" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to("/opt/compose-that-was-removed/docker-compose")
    cp = _plugin_run(tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert os.readlink(plugins / "docker-compose") == "/opt/compose-that-was-removed/docker-compose"
    assert (tmp_path / "work" / "cli-plugins" / "docker-compose").exists()


def test_engine_does_not_shadow_an_old_system_plugin(tmp_path):
    # docker compose 2.19 from /usr/libexec/docker/cli-plugins: a file in ~/.docker/cli-plugins
    # would take its place for this user, so kafkalab's own build goes beside the repository instead
    cp = _plugin_run(tmp_path, system_compose="2.19.1")
    assert cp.returncode == 0, cp.stderr
    assert not (tmp_path / "home" / ".docker" / "cli-plugins" / "docker-compose").exists()
    assert (tmp_path / "work" / "cli-plugins" / "docker-compose").exists()
    assert "Compose 2.19.1 is older than 2.20" in cp.stderr, cp.stderr


def test_engine_replaces_its_own_older_build(tmp_path):
    plugins = tmp_path / "home" / ".docker" / "cli-plugins"
    plugins.mkdir(parents=True)
    ours = plugins / "docker-compose"
    ours.write_text("#!/bin/sh\necho 2.19.0\n")  # an earlier kafkalab build, its record beside it
    ours.chmod(0o755)
    (plugins / ".kafkalab-docker-compose").write_text(
        f"built by kafkalab\nsha256={__import__('hashlib').sha256(ours.read_bytes()).hexdigest()}\n")
    cp = _plugin_run(tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert subprocess.run([ours, "version", "--short"], capture_output=True, text=True).stdout.strip() == _pinned_compose()
    assert not (tmp_path / "work" / "cli-plugins").exists()


def test_a_failed_compose_build_leaves_no_plugin_record_or_build_folder(tmp_path):
    cp = _plugin_run(tmp_path, GO_BUILD_FAILS="1")
    assert cp.returncode == 1 and "go build of Compose" in cp.stderr and "403 Forbidden" in cp.stderr, cp.stderr
    plugins = tmp_path / "home" / ".docker" / "cli-plugins"
    assert not plugins.exists() or sorted(os.listdir(plugins)) == [], "no plugin, no half-written file, no record"
    assert not list((tmp_path / "work").glob("compose-*")), "the copy of the module is removed"


def test_engine_builds_with_the_go_toolchain_the_module_needs(tmp_path):
    cp = _plugin_run(tmp_path, GO_HAS="1.24.4", GO_NEEDS="1.26.10")
    assert cp.returncode == 0, cp.stderr
    assert "needs go 1.26.10, this Go is 1.24.4" in cp.stderr, cp.stderr
    used = (tmp_path / "go-stub" / "go-env.log").read_text().splitlines()
    assert used[-1] == "GOTOOLCHAIN=go1.26.10", "the build ran with the module's Go (from the Go module proxy)"
    newer = tmp_path / "newer-go"
    newer.mkdir()
    cp = _plugin_run(newer, GO_HAS="1.26.10", GO_NEEDS="1.26.8")
    assert cp.returncode == 0, cp.stderr
    assert "toolchain" not in cp.stderr, "a newer Go builds it as it is"


def test_engine_without_root_exits_with_the_no_engine_status_and_the_reason(tmp_path):
    cp = _run_engine(tmp_path, {"docker": "echo 'Cannot connect to the Docker daemon' >&2; exit 1",
                                "id": 'echo 1000'}, "up")
    assert cp.returncode == 3, (cp.returncode, cp.stderr)
    assert "needs root" in cp.stderr and "Docker Desktop" in cp.stderr, cp.stderr


def test_engine_down_stops_only_a_dockerd_it_started(tmp_path):
    cp = _run_engine(tmp_path, {}, "down")
    assert cp.returncode == 0 and not (tmp_path / "work" / "dockerd.pid").exists(), "no record: nothing stopped"
    work = tmp_path / "work"
    work.mkdir()
    other = subprocess.Popen(["sleep", "60"])  # a pid that is not a dockerd
    try:
        (work / "dockerd.pid").write_text(str(other.pid))
        cp = _run_engine(tmp_path, {}, "down")
        assert cp.returncode == 0 and other.poll() is None, "a recorded pid that is not dockerd is left alone"
    finally:
        other.kill()
        other.wait()


def test_the_compose_version_is_pinned_in_one_place():
    pins = re.findall(r"^COMPOSE_VERSION=(v\d+\.\d+\.\d+)$", ENGINE.read_text(), flags=re.M)
    assert len(pins) == 1 and pins[0].startswith("v5."), f"one pin, a Compose v5: {pins}"
    elsewhere = [p for p in (ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / "src" / "kafkalab" / "cluster" / "compose.py",
                             Path(__file__)) if pins[0][1:] in p.read_text()]
    assert elsewhere == [], f"Compose's version is pinned in engine.sh only, not in {elsewhere}"
    minimum = re.search(r"^COMPOSE_MIN=(\d+)\.(\d+)$", ENGINE.read_text(), flags=re.M)
    assert (int(minimum[1]), int(minimum[2])) == cluster.COMPOSE_MIN, "engine.sh and the backend accept the same"


@pytest.mark.parametrize("ci", ["true", None], ids=["on-CI", "a-user"])
def test_the_compose_smoke_fails_on_ci_where_a_user_would_skip_it(tmp_path, ci):
    # make compose-smoke where engine.sh up exits 3 (no engine, not root): the real smoke module,
    # the real engine.sh; only `docker` (no engine answers) and `id` (uid 1000) are stand-ins
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    _stub(bin_dir, "docker", "echo 'Cannot connect to the Docker daemon' >&2; exit 1")
    _stub(bin_dir, "id", "echo 1000")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "KAFKALAB_PORT_BASE")}
    env.update({"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "KAFKALAB_COMPOSE_SMOKE": "1",
                "KAFKALAB_DOCKER_WORK": str(tmp_path / "work"), "KAFKALAB_STATE": str(tmp_path / "state"),
                **({"CI": ci} if ci else {})})
    cp = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_compose_live.py"), "-p",
                         "no:cacheprovider", "-q", "-rs"], capture_output=True, text=True, env=env, cwd=tmp_path,
                        timeout=300)
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", cp.stdout.splitlines()[-1]))
    if ci:
        assert cp.returncode == 1 and set(counts) <= {"error", "errors"} and counts, f"every test errs: {cp.stdout}"
        assert "no Docker engine on CI, where one can always be had (root + apt)" in cp.stdout, cp.stdout[-3000:]
    else:
        assert cp.returncode == 0 and set(counts) == {"skipped"}, f"every test is skipped: {cp.stdout}"
        assert "no Docker engine here" in cp.stdout and "needs root" in cp.stdout, cp.stdout[-3000:]
    assert not (tmp_path / "work" / "dockerd.pid").exists(), "no engine was started"


def test_a_timeline_names_the_fault_as_the_backend_carries_it_out(fake_docker, monkeypatch):
    monkeypatch.setenv("KAFKALAB_BACKEND", "local")
    assert [cluster.fault_name(v) for v in ("kill", "pause", "resume")] == ["SIGKILL", "SIGSTOP", "SIGCONT"]
    monkeypatch.setenv("KAFKALAB_BACKEND", "compose")
    assert cluster.fault_name("kill") == "SIGKILL", "docker compose kill -s SIGKILL signals the JVM itself"
    assert cluster.fault_name("pause") == "docker pause: cgroup freezer", "a container is frozen, not sent SIGSTOP"


def test_down_removes_the_volumes_its_containers_mounted(fake_docker, monkeypatch):
    fake_docker["tmp"].joinpath("ps.json").write_text(json.dumps({"Service": "broker-1", "State": "running", "ID": "a1"}) + "\n")
    monkeypatch.setenv("FAKE_DOCKER_INSPECT", "0f3e 9c2d")  # the image's anonymous volumes, by name
    cluster.ComposeCluster(Topology(1)).down()
    calls = [a for _, a in fake_docker["calls"]() if a[:1] != ["ps"]]
    assert calls[-2][3] == "down" and calls[-1] == ["volume", "rm", "0f3e", "9c2d"], calls
