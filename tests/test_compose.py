"""docker-compose.yml and environment.yml agree with the local configuration.

Pure unit tests: the compose files are parsed with PyYAML and merged the way
``docker compose -f docker-compose.yml [-f docker-compose.three-controllers.yml]`` merges
them; no Docker engine is needed. The sources of truth are ``kafkalab.config`` (topology,
ports, versions, cluster id, heaps) and ``kafka/config/{broker,controller}.properties``
(the settings the local backend renders).

The official image turns ``KAFKA_FOO_BAR`` into the property ``foo.bar`` (``__`` -> ``_``,
``___`` -> ``-``), except a few variables meant for the JVM (apache/kafka
docker/examples/README.md; core/src/main/scala/kafka/docker/KafkaDockerWrapper.scala).
"""

from __future__ import annotations

import copy
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from kafkalab import config
from kafkalab.config import Node, Topology, parse_properties

ROOT = config.repo_root()
COMPOSE = ROOT / "docker-compose.yml"
THREE_CONTROLLERS = ROOT / "docker-compose.three-controllers.yml"
ENVIRONMENT = ROOT / "environment.yml"
PYPROJECT = ROOT / "pyproject.toml"

#: Properties each node sets for itself; every other template line must be the same everywhere.
HOST_SPECIFIC = {"node.id", "controller.quorum.voters", "listeners", "advertised.listeners", "log.dirs"}
#: KAFKA_* variables the image hands to the JVM scripts instead of server.properties.
JVM_ENV = {
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME",
}
#: The Java major version the project targets (Kafka 4 brokers and Spark 4 need 17+).
JAVA_MAJOR = 17
#: The Python the project targets (pyproject.toml requires-python).
PYTHON_MINOR = "3.11"


# ----------------------------------------------------------------------------- helpers


def load_yaml(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def merge(base: Any, override: Any) -> Any:
    """Compose's merge of two files: mappings key by key, sequences joined, scalars replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(override, list):
        return base + [v for v in override if v not in base]
    return copy.deepcopy(override)


def resolve_extends(services: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Replace ``extends: {file, service}`` by the extended service merged with the local keys."""
    out = {}
    for name, service in services.items():
        ext = service.get("extends")
        if ext:
            source = load_yaml(folder / ext["file"])["services"] if "file" in ext else services
            local = {k: v for k, v in service.items() if k != "extends"}
            service = merge(copy.deepcopy(source[ext["service"]]), local)
        out[name] = service
    return out


def compose_services(controllers: int) -> dict[str, Any]:
    """The services ``docker compose`` runs for a cluster with 1 or 3 controllers."""
    model = load_yaml(COMPOSE)
    if controllers == 3:
        model = merge(model, load_yaml(THREE_CONTROLLERS))
    return resolve_extends(model["services"], COMPOSE.parent)


def env_to_property(name: str) -> str | None:
    """The server property the image renders for environment variable ``name`` (None: not a property)."""
    if not name.startswith("KAFKA_") or name in JVM_ENV:
        return None
    return name[len("KAFKA_"):].lower().replace("_", ".").replace("...", "-").replace("..", "_")


def properties(service: dict[str, Any]) -> dict[str, str]:
    """The server.properties the image would write for ``service``."""
    out = {}
    for name, value in service["environment"].items():
        prop = env_to_property(name)
        if prop is not None:
            out[prop] = value
    return out


def template(role: str) -> dict[str, str]:
    return parse_properties((config.config_templates_dir() / f"{role}.properties").read_text())


def shared_settings(role: str) -> dict[str, str]:
    """The template's settings that are the same on every node of ``role``."""
    return {k: v for k, v in template(role).items() if k not in HOST_SPECIFIC}


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``"CLIENT://:9092,INTERNAL://broker-1:9094"`` -> ``{"CLIENT": ("", 9092), ...}``."""
    out = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``ports`` as (host ip, host port, container port), short or long syntax."""
    out = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            out.append((str(entry.get("host_ip", "")), int(entry["published"]), int(entry["target"])))
        else:
            parts = str(entry).split(":")
            if len(parts) != 3:  # "9092:9092" or "9092" would bind every interface
                out.append(("", int(parts[-2]) if len(parts) == 2 else 0, int(parts[-1])))
            else:
                out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def docker_voters(topology: Topology) -> str:
    """``Topology.quorum_voters`` with each controller's container hostname instead of 127.0.0.1."""
    names = {n.node_id: n.name for n in topology.controller_nodes}
    out = []
    for voter in topology.quorum_voters.split(","):
        node_id, _, address = voter.partition("@")
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1", f"local voters are expected on 127.0.0.1, not {host}"
        out.append(f"{node_id}@{names[int(node_id)]}:{port}")
    return ",".join(out)


def nodes_with_services(controllers: int) -> list[tuple[Node, dict[str, Any]]]:
    services = compose_services(controllers)
    return [(n, services[n.name]) for n in Topology(controllers).nodes]


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
            assert "profiles" not in service, (
                f"{name} in {path.name} has a profile: a profile cannot change the voters, "
                "so the 3-controller cluster is switched by the override file alone"
            )


@TOPOLOGIES
def test_every_node_runs_the_official_image_at_the_pinned_kafka_version(controllers):
    for node, service in nodes_with_services(controllers):
        assert service["image"] == f"apache/kafka:{config.KAFKA_VERSION}", (
            f"{node.name} should run apache/kafka:{config.KAFKA_VERSION} (config.KAFKA_VERSION), "
            f"not {service['image']}"
        )


@TOPOLOGIES
def test_environment_values_are_strings(controllers):
    for node, service in nodes_with_services(controllers):
        for name, value in service["environment"].items():
            assert isinstance(value, str), f"{node.name}: {name} should be a quoted string, YAML read {value!r}"


@TOPOLOGIES
def test_node_ids_and_roles_match_the_topology(controllers):
    for node, service in nodes_with_services(controllers):
        props = properties(service)
        assert props["node.id"] == str(node.node_id), f"{node.name} should have node.id {node.node_id}"
        assert props["process.roles"] == node.role, f"{node.name} should have process.roles={node.role}"
        assert service.get("hostname") == node.name, f"{node.name} should have hostname {node.name}"


@TOPOLOGIES
def test_every_node_shares_the_cluster_id(controllers):
    for node, service in nodes_with_services(controllers):
        assert service["environment"].get("CLUSTER_ID") == config.CLUSTER_ID, (
            f"{node.name} should format its storage with CLUSTER_ID {config.CLUSTER_ID}"
        )


@TOPOLOGIES
def test_quorum_voters_are_the_topology_voters_at_container_hostnames(controllers):
    expected = docker_voters(Topology(controllers))
    for node, service in nodes_with_services(controllers):
        assert properties(service)["controller.quorum.voters"] == expected, (
            f"{node.name} should list the voters {expected}"
        )


@TOPOLOGIES
def test_every_node_sets_its_host_specific_properties(controllers):
    for node, service in nodes_with_services(controllers):
        props = properties(service)
        needed = HOST_SPECIFIC - ({"advertised.listeners"} if node.role == "controller" else set())
        missing = needed - set(props)
        assert not missing, f"{node.name} should set {sorted(missing)}"
        assert props["log.dirs"], f"{node.name} should have a log.dirs"


def test_template_placeholders_are_exactly_the_host_specific_properties():
    # If a template gains a new ${...} line, compose must set it per node: this test says so.
    for role in ("broker", "controller"):
        templated = {k for k, v in template(role).items() if "${" in v}
        expected = HOST_SPECIFIC & set(template(role))
        assert templated == expected, (
            f"{role}.properties templates {sorted(templated)}; tests/test_compose.py treats "
            f"{sorted(expected)} as host-specific"
        )


@TOPOLOGIES
def test_listener_names_and_ports_match_config(controllers):
    for node, service in nodes_with_services(controllers):
        bound = listeners(properties(service)["listeners"])
        assert {name: port for name, (_, port) in bound.items()} == node.ports, (
            f"{node.name} should bind {node.ports}, not {bound}"
        )
        for name, (host, _) in bound.items():
            assert host == "", f"{node.name} should bind {name} on all container interfaces (empty host)"


def test_brokers_advertise_client_and_fault_like_local_and_internal_at_their_hostname():
    for node, service in nodes_with_services(1):
        if node.role != "broker":
            continue
        advertised = {
            name: f"{host}:{port}" for name, (host, port) in listeners(properties(service)["advertised.listeners"]).items()
        }
        local = node.listeners()
        assert advertised["CLIENT"] == local["CLIENT"], f"{node.name} CLIENT should be advertised as {local['CLIENT']}"
        assert advertised["FAULT"] == local["FAULT"], (
            f"{node.name} FAULT should be advertised at the proxy, {local['FAULT']}"
        )
        internal = f"{node.name}:{node.ports['INTERNAL']}"
        assert advertised["INTERNAL"] == internal, f"{node.name} INTERNAL should be advertised as {internal}"
        assert set(advertised) == set(local), f"{node.name} should advertise exactly {sorted(local)}"


@TOPOLOGIES
def test_controllers_advertise_nothing_because_the_image_refuses_it(controllers):
    for node, service in nodes_with_services(controllers):
        if node.role == "controller":
            assert "KAFKA_ADVERTISED_LISTENERS" not in service["environment"], (
                f"{node.name}: the image exits when a controller sets KAFKA_ADVERTISED_LISTENERS"
            )


@TOPOLOGIES
def test_listener_names_and_protocol_map_match_the_templates(controllers):
    for node, service in nodes_with_services(controllers):
        props = properties(service)
        local = template(node.role)
        for key in ("listener.security.protocol.map", "controller.listener.names"):
            assert props[key] == local[key], f"{node.name} {key} should be {local[key]!r} as in {node.role}.properties"
        mapped = {item.split(":")[0] for item in props["listener.security.protocol.map"].split(",")}
        assert set(listeners(props["listeners"])) <= mapped, f"{node.name}: every listener needs a protocol"


@TOPOLOGIES
def test_published_ports_are_client_and_fault_ports_on_localhost_only(controllers):
    for node, service in nodes_with_services(controllers):
        ports = published(service)
        for host_ip, host_port, _ in ports:
            assert host_ip == "127.0.0.1", f"{node.name} publishes {host_port} beyond 127.0.0.1"
        if node.role == "broker":
            wanted = {node.client_port, node.ports["FAULT"]}
            assert {(h, c) for _, h, c in ports} == {(p, p) for p in wanted}, (
                f"{node.name} should publish CLIENT {node.client_port} and FAULT {node.ports['FAULT']} "
                f"on the same host ports, not {ports}"
            )
        else:
            assert ports == [], f"{node.name} should publish nothing: only brokers talk to controllers"


@TOPOLOGIES
def test_broker_settings_match_broker_properties(controllers):
    expected = shared_settings("broker")
    for node, service in nodes_with_services(controllers):
        if node.role != "broker":
            continue
        props = properties(service)
        wrong = {k: (v, props.get(k)) for k, v in expected.items() if props.get(k) != v}
        assert not wrong, f"{node.name} differs from broker.properties (local, compose): {wrong}"
        extra = set(props) - set(expected) - HOST_SPECIFIC
        assert not extra, f"{node.name} sets {sorted(extra)}, which broker.properties does not"


@TOPOLOGIES
def test_controller_settings_match_controller_properties(controllers):
    expected = shared_settings("controller")
    for node, service in nodes_with_services(controllers):
        if node.role != "controller":
            continue
        props = properties(service)
        wrong = {k: (v, props.get(k)) for k, v in expected.items() if props.get(k) != v}
        assert not wrong, f"{node.name} differs from controller.properties (local, compose): {wrong}"
        extra = set(props) - set(expected) - HOST_SPECIFIC
        assert not extra, f"{node.name} sets {sorted(extra)}, which controller.properties does not"


@TOPOLOGIES
def test_heap_matches_config(controllers):
    for node, service in nodes_with_services(controllers):
        opts = service["environment"].get("KAFKA_HEAP_OPTS", "")
        sizes = dict(re.findall(r"-Xm([sx])(\d+)m", opts))
        assert sizes == {"s": str(node.heap_mb), "x": str(node.heap_mb)}, (
            f"{node.name} should run with -Xms{node.heap_mb}m -Xmx{node.heap_mb}m, not {opts!r}"
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


# ----------------------------------------------------------------------------- environment.yml


def conda_spec(env: dict[str, Any], package: str) -> str | None:
    """Version part of ``package=version`` in the dependencies (None if unversioned or absent)."""
    for dep in env["dependencies"]:
        if isinstance(dep, str):
            match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(?:==?\s*([0-9][0-9.]*?)(?:\.\*)?)?\s*", dep)
            if match and match.group(1) == package:
                return match.group(2)
    return None


def test_environment_yml_python_satisfies_requires_python():
    env = load_yaml(ENVIRONMENT)
    requires = SpecifierSet(tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"])
    python = conda_spec(env, "python")
    assert python == PYTHON_MINOR, f"environment.yml should pin python={PYTHON_MINOR}, not {python}"
    for patch in ("0", "99"):
        assert requires.contains(f"{python}.{patch}"), f"python {python}.{patch} is outside requires-python {requires}"
    minor = int(python.split(".")[1])
    for other in (f"3.{minor - 1}.0", f"3.{minor + 1}.0"):
        assert not requires.contains(other), f"requires-python {requires} also allows {other}: pin both the same"
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" == PYTHON_MINOR, (
        f"the tests run on Python {sys.version_info[0]}.{sys.version_info[1]}, the project targets {PYTHON_MINOR}"
    )


def test_environment_yml_openjdk_is_java_17():
    env = load_yaml(ENVIRONMENT)
    java = conda_spec(env, "openjdk")
    assert java is not None and java.split(".")[0] == str(JAVA_MAJOR), (
        f"environment.yml should pin openjdk={JAVA_MAJOR} (Kafka 4 and Spark 4 need Java 17+), not {java}"
    )


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
