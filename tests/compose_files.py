"""docker-compose.yml as ``docker compose`` and the apache/kafka image read it: helpers for
tests/test_compose.py and tests/test_compose_image.py (pure Python, no Docker engine).

- The compose model: the files parsed with PyYAML and merged the way
  ``docker compose -f docker-compose.yml [-f docker-compose.three-controllers.yml]`` merges
  them (``extends`` resolved), variables interpolated (``${VAR:-default}``) from a given
  environment: none by default, which is the file a user runs by hand.
- What the image does before Kafka starts (apache/kafka ``docker/resources/common-scripts/run``
  sources ``configureDefaults`` then ``configure``, then ``docker/jvm/launch`` runs
  ``kafka.docker.KafkaDockerWrapper setup`` and ``kafka-server-start.sh``): ``image_environment``
  restates the two shell scripts' changes to the environment (they are shell, not in the jars);
  ``run_wrapper`` runs the wrapper itself, from the broker jar, the way ``launch`` calls it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from kafkalab import cluster, config
from kafkalab.config import Node, Topology

ROOT = config.repo_root()
COMPOSE = ROOT / "docker-compose.yml"
THREE_CONTROLLERS = ROOT / "docker-compose.three-controllers.yml"

#: configureDefaults: the cluster id the image uses when CLUSTER_ID is unset or empty.
IMAGE_DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"
#: The wrapper's main class, in kafka_2.13-<version>.jar (core/src/main/scala/kafka/docker/).
WRAPPER = "kafka.docker.KafkaDockerWrapper"


# ----------------------------------------------------------------------------- the compose model


def load_yaml(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _split_mount(entry: str) -> tuple[str, str]:
    """``"SOURCE:/container/path[:ro]"`` -> (source, container path); the source may hold a
    ``${VAR:-default}``, whose colon is not a separator."""
    m = re.fullmatch(r"(?P<src>.+?):(?P<dst>/[^:]*)(?::[a-z,]+)?", entry)
    assert m, f"not a short-syntax bind mount: {entry!r}"
    return m["src"], m["dst"]


def _mount_target(entry: Any) -> str:
    return entry["target"] if isinstance(entry, dict) else _split_mount(str(entry))[1]


#: ``${VAR}``, ``${VAR:-default}`` (default when unset or empty), ``${VAR-default}`` (when unset),
#: and ``$$`` (a literal ``$``): the forms of the Compose Specification's "Interpolation" used here.
_VARIABLE = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\})")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` (a string, or mappings and lists of them) with its variables replaced from
    ``env`` as ``docker compose`` replaces them (Compose Specification, "Interpolation")."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m[0] == "$$":
            return "$"
        name, op, default = m["name"], m["op"], m["default"] or ""
        if op == ":-":
            return env.get(name) or default
        if op == "-":
            return env.get(name, default)
        return env.get(name, "")

    return _VARIABLE.sub(one, value)


def merge(base: Any, override: Any, key: str | None = None) -> Any:
    """Compose's merge of two files: mappings key by key, ``volumes`` by container path,
    other sequences joined, scalars replaced (Compose Specification, "Merge")."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, value in override.items():
            out[k] = merge(base[k], value, k) if k in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(override, list):
        if key == "volumes":
            targets = {_mount_target(v) for v in override}
            return [v for v in base if _mount_target(v) not in targets] + copy.deepcopy(override)
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


#: No variable set: what the files say when run by hand (every ``${VAR:-default}`` its default).
BY_HAND: Mapping[str, str] = {}


def compose_model(controllers: int, env: Mapping[str, str] | None = BY_HAND) -> dict[str, Any]:
    """The whole model (``name``, ``services``...) ``docker compose`` reads for a cluster with 1
    or 3 controllers (the files ``ComposeCluster.compose_files`` passes), interpolated from
    ``env`` (None: as written, variables and all)."""
    model = load_yaml(COMPOSE)
    if controllers == 3:
        model = merge(model, load_yaml(THREE_CONTROLLERS))
    model["services"] = resolve_extends(model["services"], COMPOSE.parent)
    return model if env is None else interpolate(model, env)


def compose_services(controllers: int, env: Mapping[str, str] | None = BY_HAND,
                     profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    """The services of ``compose_model`` that ``docker compose`` starts with ``profiles`` active
    (``--profile``): those without ``profiles:``, and those with one of ``profiles``. With none
    active, the cluster's nodes (the lab service has the profile ``lab``)."""
    services = compose_model(controllers, env)["services"]
    return {name: s for name, s in services.items() if not s.get("profiles") or set(s["profiles"]) & set(profiles)}


def nodes_with_services(controllers: int, env: Mapping[str, str] | None = BY_HAND) -> list[tuple[Node, dict[str, Any]]]:
    services = compose_services(controllers, env)
    return [(n, services[n.name]) for n in Topology(controllers).nodes]


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


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """``volumes`` (short syntax) as container path -> host path, as written (uninterpolated)."""
    out = {}
    for entry in service.get("volumes", []):
        source, target = _split_mount(str(entry))
        out[target] = source
    return out


# ----------------------------------------------------------------------------- what the image does


def image_environment(service_env: dict[str, str]) -> dict[str, str]:
    """The environment the image's scripts hand to the wrapper for a service's ``environment``.

    ``configureDefaults``: CLUSTER_ID defaults to IMAGE_DEFAULT_CLUSTER_ID when unset or empty.
    ``configure``: with KAFKA_PROCESS_ROLES set, CLUSTER_ID is required; a controller-only node
    exits if KAFKA_ADVERTISED_LISTENERS is set; when KAFKA_LISTENERS is unset on a node that is
    not controller-only, it is KAFKA_ADVERTISED_LISTENERS with every host replaced by 0.0.0.0.
    The SSL and SASL branches are not restated: they raise.

    Raises:
        ValueError: where the image's scripts exit with an error.
    """
    env = {k: str(v) for k, v in service_env.items()}
    if not env.get("CLUSTER_ID"):
        env["CLUSTER_ID"] = IMAGE_DEFAULT_CLUSTER_ID
    roles = env.get("KAFKA_PROCESS_ROLES")
    if roles == "controller":
        if env.get("KAFKA_ADVERTISED_LISTENERS"):
            raise ValueError("KAFKA_ADVERTISED_LISTENERS is not supported on a KRaft controller.")
        env.pop("KAFKA_ADVERTISED_LISTENERS", None)
    advertised = env.get("KAFKA_ADVERTISED_LISTENERS", "")
    if not env.get("KAFKA_LISTENERS") and roles != "controller" and advertised:
        env["KAFKA_LISTENERS"] = re.sub(r"://[^:]*:", "://0.0.0.0:", advertised)
    if "SSL://" in advertised or re.search(r"SASL_.*://", advertised):
        raise ValueError("SSL/SASL listeners: configure's key store checks are not restated here")
    return env


def wrapper_command(final_dir: Path, jvm_options: tuple[str, ...] = ()) -> list[str]:
    """``kafka-run-class.sh kafka.docker.KafkaDockerWrapper setup ...`` as docker/jvm/launch
    runs it, as a small JVM on the broker jars. The default and mounted config folders are
    empty siblings of ``final_dir``: the image's defaults are only used when the environment
    renders nothing, and compose mounts no config files."""
    defaults, mounted = final_dir.parent / "image-defaults", final_dir.parent / "mounted"
    for d in (defaults, mounted, final_dir):
        d.mkdir(parents=True, exist_ok=True)
    return [
        cluster.java_executable(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", *jvm_options,
        "-cp", cluster.broker_classpath(), WRAPPER, "setup",
        "--default-configs-dir", str(defaults),
        "--mounted-configs-dir", str(mounted),
        "--final-configs-dir", str(final_dir),
    ]


def run_wrapper(env: dict[str, str], final_dir: Path, jvm_options: tuple[str, ...] = (),
                timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    """Run the wrapper's ``setup`` with exactly ``env`` (plus PATH), as the container would:
    it writes ``final_dir/server.properties`` (and the log4j2 files) and formats the storage
    in ``log.dirs`` with CLUSTER_ID.

    Raises:
        AssertionError: the wrapper exited non-zero (its output in the message).
    """
    cp = subprocess.run(wrapper_command(final_dir, jvm_options), env={"PATH": os.environ.get("PATH", ""), **env},
                        capture_output=True, text=True, timeout=timeout_s)
    assert cp.returncode == 0, f"KafkaDockerWrapper setup exited {cp.returncode}:\n{cp.stdout}\n{cp.stderr}"
    return cp


def run_wrappers(jobs: list[tuple[dict[str, str], Path]], class_archive: Path) -> None:
    """``run_wrapper`` for each (env, final_dir): the first alone, writing a class-data sharing
    archive of what it loaded to ``class_archive`` (as the image does for the same command,
    storage.jsa), then the others two at a time with it (half the CPU time each)."""
    (env, final), rest = jobs[0], jobs[1:]
    run_wrapper(env, final, (f"-XX:ArchiveClassesAtExit={class_archive}",))
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda job: run_wrapper(*job, (f"-XX:SharedArchiveFile={class_archive}",)), rest))
