#!/usr/bin/env bash
# The Docker engine and Docker Compose for kafkalab's compose backend, and the stand-in Kafka image.
#
#   kafka/docker/engine.sh up      an engine that answers and a `docker compose` of 2.20 or newer
#                                  (v5 included); installs what is missing where it can (root + apt,
#                                  Go), else says why
#   kafka/docker/engine.sh image   the Kafka image of kafka/docker/Dockerfile, built on a Debian
#                                  base made by debootstrap (no registry needed); prints its tag
#   kafka/docker/engine.sh lab-image
#                                  the lab image of .devcontainer/Dockerfile (JupyterLab, a JDK,
#                                  kafkalab, the jars), on python:3.13-slim or, where no registry
#                                  serves it, a stand-in of that name made here; prints its tag
#   kafka/docker/engine.sh down    stops dockerd if `up` started it (and only then)
#   kafka/docker/engine.sh compose-version-ok VERSION
#                                  exit 0 when VERSION (`docker compose version --short`) is
#                                  accepted, else 1 with the reason on stderr
#
# Idempotent and cached: a second `up` finds the engine and Compose and does nothing; a second
# `image` finds the tag of its inputs' hash and builds nothing. On a machine with a working
# `docker compose` 2.20 or newer (Docker Desktop, docker-ce, a distribution's packages) nothing
# is installed.
#
# Compose, and a user's plugin. Accepted: `docker compose version --short` of 2.20 or newer, any
# major above 2 (Docker has shipped v5 since 2025-12): 2.20.0, v2.40.3, 5.7.1, 5.0.0-desktop.1.
# Rejected, saying why: 2.x older than 2.20, and Compose v1 (`docker-compose`, which rejects
# docker-compose.yml's top-level `name:`). Where none is accepted, Compose $COMPOSE_VERSION is
# built from the Go module proxy, and placed so that no `docker compose` the user has changes:
#   - no `docker compose` answers and ~/.docker/cli-plugins/docker-compose does not exist: it is
#     installed there (so `docker compose` works for the user too), with a record beside it,
#     .kafkalab-docker-compose (its version and sha256), which marks the file as kafkalab's;
#   - the file there is kafkalab's (the record matches it): it is replaced by the new build;
#   - anything else (the user's own plugin, too old or broken; a system plugin answering with an
#     old version): left as it is, and the build goes to .kafkalab/docker/cli-plugins/docker-compose
#     in the repository, which the compose backend runs as a standalone `docker-compose`
#     (kafkalab.cluster.compose_program); the user's `docker compose` stays theirs.
#
# Exit status: 0 done; NO_ENGINE (3) when no engine can be had here (not root, no apt-get, dockerd
# does not start, no Go to build Compose): the reason is on stderr, and the compose smoke
# (tests/test_compose_live.py) turns it into a skip, except on CI ($CI=true), where it is a
# failure; anything else is a failure.
#
# Measured on Debian 12, as root (shared/FACTS.md, "Containers on this machine"): Debian's
# docker.io 20.10.24 runs containers (overlay2); its docker-compose is v1.29.2, which rejects the
# top-level `name:` of docker-compose.yml, so Compose is built from the Go module proxy
# (`go install pkg@version` refuses the module's exclude directives: it is built in a copy of the
# module's folder). Compose v5 requires a newer Go than many distributions ship (v5.7.1: go
# 1.26.10): the build then asks Go for that toolchain (GOTOOLCHAIN=go<version>, a module of the Go
# module proxy, checked against sum.golang.org). Docker Hub cannot be reached here: the base
# image comes from Debian's mirror.
set -euo pipefail

#: Compose, pinned here and only here: the newest v5 the Go module proxy can build, v5.6.0
#: (2026-10-02; github.com/docker/compose/releases/tag/v5.6.0). v5.7.0 and v5.7.1 need
#: github.com/docker/secrets-engine/{client,x}, which the proxy answers "403 Forbidden: This module
#: version is not available" (checked 2026-11-28), so `go build` cannot fetch them.
COMPOSE_VERSION=v5.6.0
#: Its Go module: from v5 on the major version is part of the path (v2's was github.com/docker/compose/v2).
COMPOSE_MODULE=github.com/docker/compose/${COMPOSE_VERSION%%.*}
#: The oldest `docker compose` accepted (MAJOR.MINOR); kafkalab.cluster.COMPOSE_MIN says the same.
COMPOSE_MIN=2.20
#: The base image: Debian 12 (bookworm) minbase, from debootstrap (tag kept by `image`).
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${KAFKALAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=kafkalab/debian:${DEBIAN_SUITE}-minbase
NO_ENGINE=3
#: The lab image's base (.devcontainer/Dockerfile's FROM): the official image a user pulls. Where
#: no registry serves it (this project's CI), `lab-image` makes a stand-in of the same name: Debian
#: 13 (trixie, whose Python is 3.13, as python:3.13-slim's base is trixie) minbase from debootstrap,
#: with python3, python3-venv, python3-pip and /usr/local/bin/python3 -> /usr/bin/python3, so the
#: Dockerfile runs unchanged on either.
LAB_BASE_IMAGE=python:3.13-slim
LAB_SUITE=trixie
LAB_IMAGE=kafkalab/lab

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# Machine-wide things (the engine we started, the build folders) live beside the jars, in the
# repository's .kafkalab/, independent of $KAFKALAB_STATE (as config.jars_dir).
WORK=${KAFKALAB_DOCKER_WORK:-$REPO/.kafkalab/docker}
PLUGIN_DIR=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
#: The record that marks $PLUGIN_DIR/docker-compose as built by kafkalab (not named docker-*:
#: the docker CLI would take it for a plugin).
MARKER=$PLUGIN_DIR/.kafkalab-docker-compose
#: Where kafkalab's own Compose goes when a user's plugin is in the way (cluster.compose_program).
OWN_COMPOSE=$WORK/cli-plugins/docker-compose
JARS=${KAFKALAB_JARS:-$REPO/.kafkalab/jars}/broker

say() { echo "engine.sh: $*" >&2; }
no_engine() { say "no Docker engine for the compose backend: $*"; exit "$NO_ENGINE"; }

engine_answers() { docker info >/dev/null 2>&1; }
# compose_version_ok VERSION: 0 when VERSION (`docker compose version --short`: 2.40.3, v2.40.3,
# 5.0.0-desktop.1) is $COMPOSE_MIN or newer; else 1, the reason in $WHY.
WHY=
compose_version_ok() {
  local v=${1#v} major minor min_major=${COMPOSE_MIN%.*} min_minor=${COMPOSE_MIN#*.}
  v=${v//[[:space:]]/}
  if ! [[ $v =~ ^([0-9]+)\.([0-9]+)(\.[0-9]+)?([-+][0-9A-Za-z.+-]*)?$ ]]; then
    WHY="\`docker compose version --short\` answered ${1:-nothing}, not a version"; return 1
  fi
  major=$((10#${BASH_REMATCH[1]})) minor=$((10#${BASH_REMATCH[2]}))
  if ((major < 2)); then
    WHY="Compose $1 is Compose v1, which rejects docker-compose.yml's top-level name: ($COMPOSE_MIN or newer is needed)"; return 1
  fi
  if ((major == min_major && minor < min_minor)); then
    WHY="Compose $1 is older than $COMPOSE_MIN"; return 1
  fi
  return 0
}
# compose_ok [PROGRAM...]: `PROGRAM version --short` (default: docker compose) answers an accepted version.
compose_ok() {
  local v
  (($#)) || set -- docker compose
  if ! v=$("$@" version --short 2>/dev/null); then
    WHY="\`$*\` does not answer"
    command -v docker-compose >/dev/null && [ "$*" = "docker compose" ] && WHY+=" (found only $(command -v docker-compose): $(docker-compose version --short 2>/dev/null || echo Compose v1))"
    return 1
  fi
  compose_version_ok "$v"
}
# The plugin file is kafkalab's: the record beside it names its sha256.
plugin_is_ours() {
  [ -f "$PLUGIN_DIR/docker-compose" ] && [ -f "$MARKER" ] || return 1
  local sum; sum=$(sha256sum "$PLUGIN_DIR/docker-compose" | cut -d' ' -f1)
  grep -qx "sha256=$sum" "$MARKER"
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

# go_at_least A B: Go version A (1.26.8) is B or newer.
go_at_least() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

# build_compose TARGET: Compose $COMPOSE_VERSION built from the Go module proxy, written to TARGET.
build_compose() {
  local target=$1
  command -v go >/dev/null || no_engine "no accepted Compose ($WHY) and there is no Go toolchain to build one (https://go.dev/dl/), or install Docker's docker-compose-plugin package"
  local info dir gomod need have build t0=$SECONDS
  say "building Compose $COMPOSE_VERSION ($COMPOSE_MODULE) from the Go module proxy (a few minutes on 2 cores)"
  info=$(go mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION" 2>/dev/null || true)
  gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$info")
  need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod" 2>/dev/null | head -1)
  have=$(go env GOVERSION); have=${have#go}
  if [ -n "$need" ] && ! go_at_least "$have" "$need"; then
    say "Compose $COMPOSE_VERSION needs go $need, this Go is $have: using the go$need toolchain (from the Go module proxy)"
    export GOTOOLCHAIN=go$need
    info=$(go mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION")
  fi
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")
  [ -n "$dir" ] || { say "go mod download gave no folder for $COMPOSE_MODULE@$COMPOSE_VERSION: $info"; exit 1; }
  build=$WORK/compose-$COMPOSE_VERSION
  rm -rf "$build"; mkdir -p "$WORK" "$(dirname "$target")"
  cp -r "$dir" "$build"; chmod -R u+w "$build"  # the module cache is read-only
  if ! (cd "$build" && CGO_ENABLED=0 go build -trimpath -o "$target.new" \
        -ldflags "-s -w -X $COMPOSE_MODULE/internal.Version=$COMPOSE_VERSION" ./cmd); then
    rm -rf "$build" "$target.new"  # no half-made copy of the module is left behind
    say "go build of Compose $COMPOSE_VERSION failed (above)"; exit 1
  fi
  mv "$target.new" "$target"
  rm -rf "$build"
  say "Compose $COMPOSE_VERSION built in $((SECONDS - t0)) s: $target"
}

# install_compose: build Compose where it changes no `docker compose` the user has (see the top).
install_compose() {
  local why=$WHY target
  local plugin=$PLUGIN_DIR/docker-compose
  if plugin_is_ours || { [ ! -e "$plugin" ] && [ ! -L "$plugin" ] && ! docker compose version >/dev/null 2>&1; }; then
    target=$PLUGIN_DIR/docker-compose
  else
    target=$OWN_COMPOSE
    say "leaving the docker compose you have as it is ($why); kafkalab builds its own at $target"
  fi
  WHY=$why build_compose "$target"
  if [ "$target" = "$plugin" ]; then
    printf 'built by kafkalab (kafka/docker/engine.sh), Compose %s\nsha256=%s\n' "$COMPOSE_VERSION" \
      "$(sha256sum "$target" | cut -d' ' -f1)" > "$MARKER.new"
    mv "$MARKER.new" "$MARKER"
    rm -f "$OWN_COMPOSE"
  fi
}

# compose_answers: an accepted `docker compose`, or kafkalab's own build of the pinned version.
compose_answers() {
  compose_ok && return 0
  local why=$WHY
  if [ -x "$OWN_COMPOSE" ] && compose_ok "$OWN_COMPOSE" \
     && [ "$("$OWN_COMPOSE" version --short 2>/dev/null)" = "${COMPOSE_VERSION#v}" ]; then
    return 0
  fi
  WHY=$why
  return 1
}

cmd_up() {
  if engine_answers && compose_answers; then return 0; fi
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
  compose_answers || install_compose
  compose_answers || { say "no accepted Compose after the build: $WHY"; exit 1; }
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
    debootstrap_image "$DEBIAN_SUITE" "$BASE_IMAGE"
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

# debootstrap_image SUITE TAG: a Debian SUITE minbase root from $DEBIAN_MIRROR, imported as TAG.
debootstrap_image() {
  local suite=$1 tag=$2
  command -v debootstrap >/dev/null || {
    is_root && command -v apt-get >/dev/null && apt_install debootstrap
  } || no_engine "the base image $tag needs debootstrap (Debian: apt-get install debootstrap)"
  is_root || no_engine "debootstrap needs root to make the base image $tag"
  local rootfs=$WORK/rootfs-$suite
  rm -rf "$rootfs"; mkdir -p "$WORK"
  say "making $tag with debootstrap from $DEBIAN_MIRROR"
  debootstrap --variant=minbase "$suite" "$rootfs" "$DEBIAN_MIRROR" >"$WORK/debootstrap-$suite.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap-$suite.log" >&2; exit 1; }
  tar -C "$rootfs" -c . | docker import - "$tag" >/dev/null
  rm -rf "$rootfs"
}

# lab_base_standin: $LAB_BASE_IMAGE made here (no registry): trixie minbase + Python 3.13, with
# this machine's own CA certificates (/usr/local/share/ca-certificates, as .ci/debian13.sh's
# copy_trust_store) in the system trust store, which pip (PIP_CERT) and, once the Dockerfile
# installs a JDK, Java's keystore (ca-certificates-java) read: the build fetches from PyPI and
# Maven Central through this machine's network. The official image needs none of it.
lab_base_standin() {
  local raw=kafkalab/debian:$LAB_SUITE-minbase ctx=$WORK/lab-base-context
  docker image inspect "$raw" >/dev/null 2>&1 || debootstrap_image "$LAB_SUITE" "$raw"
  rm -rf "$ctx"; mkdir -p "$ctx/ca"
  [ -d /usr/local/share/ca-certificates ] && cp -a /usr/local/share/ca-certificates/. "$ctx/ca/"
  cat > "$ctx/Dockerfile" <<EOF
FROM $raw
COPY ca/ /usr/local/share/ca-certificates/
RUN set -eux; export DEBIAN_FRONTEND=noninteractive; \\
    printf 'deb $DEBIAN_MIRROR $LAB_SUITE main\ndeb $DEBIAN_MIRROR $LAB_SUITE-updates main\ndeb ${DEBIAN_MIRROR%/debian}/debian-security $LAB_SUITE-security main\n' > /etc/apt/sources.list; \\
    apt-get update -qq; \\
    apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip ca-certificates >/dev/null; \\
    update-ca-certificates >/dev/null; \\
    ln -s /usr/bin/python3 /usr/local/bin/python3; ln -s /usr/bin/python3 /usr/local/bin/python; \\
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*
ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
LABEL org.opencontainers.image.title="kafkalab stand-in for $LAB_BASE_IMAGE (Debian $LAB_SUITE minbase + python3)"
CMD ["python3"]
EOF
  say "making the stand-in $LAB_BASE_IMAGE (no registry here)"
  DOCKER_BUILDKIT=0 docker build -q -t "$LAB_BASE_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# The lab image's inputs: every file of the build context that git tracks or would track
# (.dockerignore leaves out what git ignores), by content, so a change of the Dockerfile, the
# lock, the POMs or the package rebuilds it, and nothing else does.
lab_inputs_hash() {
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | LC_ALL=C sort -z \
     | xargs -0 sha256sum 2>/dev/null) | sha256sum | cut -c1-12
}

cmd_lab_image() {
  engine_answers || no_engine "no Docker engine answers: kafka/docker/engine.sh up first"
  local tag t0=$SECONDS
  tag=$LAB_IMAGE:$(lab_inputs_hash)
  if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"; return 0
  fi
  docker image inspect "$LAB_BASE_IMAGE" >/dev/null 2>&1 || lab_base_standin
  say "building $tag (.devcontainer/Dockerfile; log: $WORK/lab-build.log)"
  # the legacy builder, as for the Kafka image: Debian's engine has no BuildKit plugin (buildx)
  DOCKER_BUILDKIT=0 docker build -f "$REPO/.devcontainer/Dockerfile" -t "$tag" "$REPO" >"$WORK/lab-build.log" 2>&1 \
    || { tail -n 30 "$WORK/lab-build.log" >&2; say "building $tag failed (log: $WORK/lab-build.log)"; exit 1; }
  docker tag "$tag" "$LAB_IMAGE:latest"
  # earlier builds (other input hashes) go: only the current one is used
  docker images "$LAB_IMAGE" --format '{{.Repository}}:{{.Tag}}' | grep -vxF -e "$tag" -e "$LAB_IMAGE:latest" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
  say "built $tag in $((SECONDS - t0)) s"
  echo "$tag"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  image) tag=$(cmd_image); mkdir -p "$WORK"; echo "$tag" > "$WORK/image"; echo "$tag" ;;
  lab-image) mkdir -p "$WORK"; tag=$(cmd_lab_image); echo "$tag" > "$WORK/lab-image"; echo "$tag" ;;
  compose-version-ok) compose_version_ok "${2:-}" || { say "$WHY"; exit 1; } ;;
  *) echo "usage: $0 up|image|lab-image|down|compose-version-ok VERSION" >&2; exit 2 ;;
esac
