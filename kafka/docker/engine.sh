#!/usr/bin/env bash
# The Docker engine and Compose v2 for kafkalab's compose backend, and the stand-in Kafka image.
#
#   kafka/docker/engine.sh up      an engine that answers and `docker compose` v2; installs
#                                  what is missing where it can (root + apt), else says why
#   kafka/docker/engine.sh image   the Kafka image of kafka/docker/Dockerfile, built on a Debian
#                                  base made by debootstrap (no registry needed); prints its tag
#   kafka/docker/engine.sh down    stops dockerd if `up` started it (and only then)
#
# Idempotent and cached: a second `up` finds the engine and the plugin and does nothing; a second
# `image` finds the tag of its inputs' hash and builds nothing. On a machine with a working
# `docker compose` v2 (Docker Desktop, a distribution's packages) nothing is installed.
#
# Exit status: 0 done; NO_ENGINE (3) when no engine can be had here (not root, no apt-get, dockerd
# does not start, no Go to build Compose v2): the reason is on stderr, and the compose smoke
# (tests/test_compose_live.py) turns it into a skip; anything else is a failure.
#
# Measured on Debian 12, as root (shared/FACTS.md, "Containers on this machine"): Debian's
# docker.io 20.10.24 runs containers (overlay2); its docker-compose is v1.29.2, which rejects the
# top-level `name:` of docker-compose.yml, so Compose v2 is built from the Go module proxy
# (`go install pkg@version` refuses the module's replace directives: it is built in a copy of the
# module's folder). Docker Hub cannot be reached here: the base image comes from Debian's mirror.
set -euo pipefail

#: Compose v2, pinned here and only here (github.com/docker/compose/releases/tag/v2.40.3).
COMPOSE_VERSION=v2.40.3
#: The base image: Debian 12 (bookworm) minbase, from debootstrap (tag kept by `image`).
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${KAFKALAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=kafkalab/debian:${DEBIAN_SUITE}-minbase
NO_ENGINE=3

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# Machine-wide things (the engine we started, the build folders) live beside the jars, in the
# repository's .kafkalab/, independent of $KAFKALAB_STATE (as config.jars_dir).
WORK=${KAFKALAB_DOCKER_WORK:-$REPO/.kafkalab/docker}
PLUGIN_DIR=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
JARS=${KAFKALAB_JARS:-$REPO/.kafkalab/jars}/broker

say() { echo "engine.sh: $*" >&2; }
no_engine() { say "no Docker engine for the compose backend: $*"; exit "$NO_ENGINE"; }

engine_answers() { docker info >/dev/null 2>&1; }
compose_v2() {
  local v
  v=$(docker compose version --short 2>/dev/null) || return 1
  [[ ${v#v} == 2.* ]]
}
is_root() { [ "$(id -u)" = 0 ]; }

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq "$@" >/dev/null; }
}

start_dockerd() {
  mkdir -p "$WORK"
  say "starting dockerd (log: $WORK/dockerd.log)"
  # its own session: a Ctrl-C in the shell that ran `up` does not reach it; `down` stops it
  setsid dockerd >"$WORK/dockerd.log" 2>&1 < /dev/null &
  echo $! > "$WORK/dockerd.pid"
  local i
  for i in $(seq 1 120); do
    engine_answers && return 0
    kill -0 "$(cat "$WORK/dockerd.pid")" 2>/dev/null || break
    sleep 0.5
  done
  rm -f "$WORK/dockerd.pid"
  no_engine "dockerd did not start; its log ends with: $(tail -n 5 "$WORK/dockerd.log" | tr '\n' ' ')"
}

build_compose() {
  command -v go >/dev/null || no_engine "Compose v2 is missing and there is no Go toolchain to build it (https://go.dev/dl/), or install the docker-compose-plugin package"
  local dir build t0=$SECONDS
  say "building Compose $COMPOSE_VERSION from the Go module proxy (about 2 minutes on 2 cores)"
  dir=$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { say "go mod download gave no folder for github.com/docker/compose/v2@$COMPOSE_VERSION"; exit 1; }
  build=$WORK/compose-$COMPOSE_VERSION
  rm -rf "$build"; mkdir -p "$WORK"
  cp -r "$dir" "$build"; chmod -R u+w "$build"  # the module cache is read-only
  mkdir -p "$PLUGIN_DIR"
  (cd "$build" && CGO_ENABLED=0 go build -trimpath -o "$PLUGIN_DIR/docker-compose.new" \
     -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" ./cmd)
  mv "$PLUGIN_DIR/docker-compose.new" "$PLUGIN_DIR/docker-compose"
  rm -rf "$build"
  say "Compose $COMPOSE_VERSION built in $((SECONDS - t0)) s: $PLUGIN_DIR/docker-compose"
}

cmd_up() {
  if engine_answers && compose_v2; then return 0; fi
  if ! engine_answers; then
    if ! command -v dockerd >/dev/null; then
      is_root || no_engine "no Docker engine answers and installing one needs root (install Docker Desktop or Debian's docker.io)"
      command -v apt-get >/dev/null || no_engine "no Docker engine answers and there is no apt-get to install Debian's docker.io"
      say "installing Debian's docker.io and debootstrap"
      apt_install docker.io debootstrap || no_engine "apt-get install docker.io failed"
    fi
    if ! command -v docker >/dev/null; then no_engine "dockerd is installed but the docker command is not"; fi
    is_root || no_engine "dockerd is installed but not running, and starting it needs root (sudo systemctl start docker)"
    start_dockerd
  fi
  compose_v2 || build_compose
  compose_v2 || { say "docker compose still is not v2 after the build: $(docker compose version 2>&1 | head -1)"; exit 1; }
}

cmd_down() {
  local pid_file=$WORK/dockerd.pid pid
  [ -f "$pid_file" ] || return 0  # not ours: leave it running
  pid=$(cat "$pid_file")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ]; then
    kill -TERM "$pid"
    local i
    for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { say "dockerd ($pid) still runs 30 s after SIGTERM"; exit 1; }
    say "dockerd ($pid) stopped"
  else
    say "the dockerd engine.sh started ($pid) no longer runs"
  fi
  rm -f "$pid_file"
}

# The image's inputs: what `image` hashes into the tag, so that it is rebuilt only when one changes.
image_inputs_hash() {
  (
    cd "$HERE"
    sha256sum Dockerfile run launch server.properties log4j2.yaml tools-log4j2.yaml
    [ -d "$JARS" ] && (cd "$JARS" && ls -1 *.jar | LC_ALL=C sort | xargs sha256sum)
  ) | sha256sum | cut -c1-12
}

cmd_image() {
  engine_answers || no_engine "no Docker engine answers: kafka/docker/engine.sh up first"
  ls "$JARS"/kafka_2.13-*.jar >/dev/null 2>&1 || { say "no broker jars in $JARS: make jars first"; exit 1; }
  local version tag t0=$SECONDS
  version=$(basename "$JARS"/kafka_2.13-*.jar .jar); version=${version#kafka_2.13-}
  tag=kafkalab/kafka:$version-$(image_inputs_hash)
  if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"; return 0
  fi
  if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || {
      is_root && command -v apt-get >/dev/null && apt_install debootstrap
    } || no_engine "the base image $BASE_IMAGE needs debootstrap (Debian: apt-get install debootstrap)"
    is_root || no_engine "debootstrap needs root to make the base image $BASE_IMAGE"
    local rootfs=$WORK/rootfs-$DEBIAN_SUITE
    rm -rf "$rootfs"; mkdir -p "$WORK"
    say "making $BASE_IMAGE with debootstrap from $DEBIAN_MIRROR"
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$WORK/debootstrap.log" 2>&1 \
      || { tail -n 20 "$WORK/debootstrap.log" >&2; exit 1; }
    tar -C "$rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
  fi
  # The build context: the Dockerfile, its two scripts and the jars (hard links: no copy).
  local ctx=$WORK/image-context
  rm -rf "$ctx"; mkdir -p "$ctx/jars"
  cp "$HERE"/{Dockerfile,run,launch,server.properties,log4j2.yaml,tools-log4j2.yaml} "$ctx/"
  ln "$JARS"/*.jar "$ctx/jars/" 2>/dev/null || cp "$JARS"/*.jar "$ctx/jars/"
  say "building $tag"
  # the legacy builder: Debian's engine has no BuildKit plugin (buildx) to go with it
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "KAFKA_VERSION=$version" \
    -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  # earlier builds (other input hashes) go: only the current one is used
  docker images kafkalab/kafka --format '{{.Repository}}:{{.Tag}}' | grep -vxF "$tag" | xargs -r docker rmi >/dev/null 2>&1 || true
  say "built $tag in $((SECONDS - t0)) s"
  echo "$tag"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  image) tag=$(cmd_image); mkdir -p "$WORK"; echo "$tag" > "$WORK/image"; echo "$tag" ;;
  *) echo "usage: $0 up|image|down" >&2; exit 2 ;;
esac
