#!/usr/bin/env bash
# The workshop hub's start and stop (make workshop, workshop-down, workshop-clean; issue 39).
#
#   workshop/workshop.sh up      secrets (first time), images (when missing or changed), the hub
#                                started (docker compose -f workshop/compose.yml up -d), its URL
#   workshop/workshop.sh down    the hub stopped (it stops every learner's lab), then whatever of
#                                the project is left: no container, no network
#   workshop/workshop.sh clean   down, then the learners' notebook volumes
#   workshop/workshop.sh status  the hub and the learners' labs that run
#
# Environment (defaults in brackets; workshop/jupyterhub_config.py lists the hub's own):
#   WORKSHOP_IP [127.0.0.1]   the host interface to publish on; another one needs TLS:
#   WORKSHOP_TLS_CERT, WORKSHOP_TLS_KEY   PEM files of a certificate for the room's address, or
#   WORKSHOP_TLS=self-signed  a certificate made at the first start, for WORKSHOP_TLS_NAME [the
#                             address, or this host's name for 0.0.0.0], kept in the secrets
#                             folder (delete tls.* there to make another); browsers warn once
#   WORKSHOP_PORT [8000]      the host port
#   WORKSHOP_PASSWORD         the learners' shared password [made once: workshop/.secrets/learner-password]
#   WORKSHOP_PROJECT [kafkalab-workshop]  names everything (two hubs on one host: two projects)
#   WORKSHOP_SECRETS [workshop/.secrets]  where the passwords and the admin API token are kept
#   WORKSHOP_LAB_IMAGE        the lab image to build on [kafka/docker/engine.sh lab-image finds or builds it]
#
# Secrets (never in git: workshop/.secrets/ is ignored): learner-password (made once, or
# WORKSHOP_PASSWORD), admin-password (the instructor's, 43 characters, made once), api-token
# (an admin token for the REST API, made anew at every start).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
export WORKSHOP_PROJECT=${WORKSHOP_PROJECT:-kafkalab-workshop}
export WORKSHOP_IP=${WORKSHOP_IP:-127.0.0.1}
export WORKSHOP_PORT=${WORKSHOP_PORT:-8000}
export WORKSHOP_SECRETS=${WORKSHOP_SECRETS:-$HERE/.secrets}
LABEL=org.kafkalab.workshop
HUB_IMAGE=kafkalab/workshop-hub
LAB_IMAGE=kafkalab/workshop-lab
say() { echo "workshop: $*" >&2; }
die() { say "$*"; exit 2; }

# Compose: kafkalab's own build where kafka/docker/engine.sh made one (as kafkalab.cluster.compose_program),
# else `docker compose`.
compose() {
  local own=${KAFKALAB_DOCKER_WORK:-$REPO/.kafkalab/docker}/cli-plugins/docker-compose
  if [ -x "$own" ]; then
    "$own" -f "$HERE/compose.yml" -p "$WORKSHOP_PROJECT" "$@"
  else
    docker compose -f "$HERE/compose.yml" -p "$WORKSHOP_PROJECT" "$@"
  fi
}

is_loopback() {
  case "$1" in 127.*|::1|localhost) return 0 ;; *) return 1 ;; esac
}

# The TLS rule, before anything starts: another interface than loopback needs a certificate.
check_tls() {
  is_loopback "$WORKSHOP_IP" && return 0
  if [ -n "${WORKSHOP_TLS_CERT:-}" ] || [ -n "${WORKSHOP_TLS_KEY:-}" ]; then
    [ -f "${WORKSHOP_TLS_CERT:-}" ] && [ -f "${WORKSHOP_TLS_KEY:-}" ] \
      || die "WORKSHOP_TLS_CERT and WORKSHOP_TLS_KEY must both name PEM files"
    return 0
  fi
  [ "${WORKSHOP_TLS:-}" = self-signed ] && return 0
  die "WORKSHOP_IP=$WORKSHOP_IP serves the hub beyond this host, which needs TLS: give
  WORKSHOP_TLS_CERT=cert.pem WORKSHOP_TLS_KEY=key.pem (a certificate for the address learners open),
  or WORKSHOP_TLS=self-signed to make one (browsers warn once); nothing was started"
}

# random N: N letters and digits from /dev/urandom.
random() { local s; s=$(head -c 2048 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9'); echo "${s:0:$1}"; }

write_secrets() {
  mkdir -p "$WORKSHOP_SECRETS"; chmod 700 "$WORKSHOP_SECRETS"
  umask 077
  if [ -n "${WORKSHOP_PASSWORD:-}" ]; then
    [ ${#WORKSHOP_PASSWORD} -ge 8 ] || die "WORKSHOP_PASSWORD must be 8 characters or longer (JupyterHub's SharedPasswordAuthenticator)"
    printf '%s\n' "$WORKSHOP_PASSWORD" > "$WORKSHOP_SECRETS/learner-password"
  elif [ ! -s "$WORKSHOP_SECRETS/learner-password" ]; then
    random 12 > "$WORKSHOP_SECRETS/learner-password"  # 12 characters, easy to write on a board
  fi
  [ -s "$WORKSHOP_SECRETS/admin-password" ] || random 43 > "$WORKSHOP_SECRETS/admin-password"
  random 43 > "$WORKSHOP_SECRETS/api-token"
  if [ -n "${WORKSHOP_TLS_CERT:-}" ]; then
    cp "$WORKSHOP_TLS_CERT" "$WORKSHOP_SECRETS/tls.crt"; cp "$WORKSHOP_TLS_KEY" "$WORKSHOP_SECRETS/tls.key"
  fi
}

# inputs_hash FILE...: the tag of an image built from these files (rebuilt only when one changes).
inputs_hash() { (cd "$HERE" && sha256sum "$@" && echo "${EXTRA_INPUT:-}") | sha256sum | cut -c1-12; }

build_images() {
  local lab t0 tag
  # the legacy builder, as kafka/docker/engine.sh: Debian's engine has no BuildKit plugin (buildx)
  export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}
  if [ -n "${WORKSHOP_LAB_IMAGE:-}" ]; then
    lab=$WORKSHOP_LAB_IMAGE
  else
    lab=$("$REPO/kafka/docker/engine.sh" lab-image | tail -n 1)
  fi
  docker image inspect "$lab" >/dev/null 2>&1 || die "no lab image $lab"
  tag=$HUB_IMAGE:$(inputs_hash hub.Dockerfile hub.lock proxy/package.json proxy/package-lock.json jupyterhub_config.py)
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    t0=$SECONDS; say "building $tag (workshop/hub.Dockerfile)"
    docker build -q -f "$HERE/hub.Dockerfile" -t "$tag" "$HERE" >/dev/null
    say "built $tag in $((SECONDS - t0)) s"
  fi
  export WORKSHOP_HUB_IMAGE=$tag
  tag=$LAB_IMAGE:$(EXTRA_INPUT=$(docker image inspect -f '{{.Id}}' "$lab") inputs_hash singleuser.Dockerfile singleuser.lock singleuser-start)
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    t0=$SECONDS; say "building $tag (workshop/singleuser.Dockerfile on $lab)"
    docker build -q -f "$HERE/singleuser.Dockerfile" --build-arg "LAB_IMAGE=$lab" -t "$tag" "$HERE" >/dev/null
    say "built $tag in $((SECONDS - t0)) s"
  fi
  export WORKSHOP_SINGLEUSER_IMAGE=$tag
}

scheme() { if is_loopback "$WORKSHOP_IP"; then echo http; else echo https; fi; }

wait_for_hub() {
  local url=$1 deadline=$((SECONDS + ${WORKSHOP_START_TIMEOUT:-180}))
  # -k: a self-signed certificate is the hub's own
  until curl -fsk -o /dev/null --max-time 5 "$url"; do
    if [ -z "$(docker ps -q --filter "label=com.docker.compose.project=$WORKSHOP_PROJECT" --filter status=running)" ]; then
      compose logs --no-color --tail 40 hub >&2 || true
      say "the hub stopped (its log above)"; return 1
    fi
    ((SECONDS < deadline)) || { say "the hub did not answer at $url"; return 1; }
    sleep 1
  done
}

cmd_up() {
  check_tls
  docker info >/dev/null 2>&1 || die "no Docker engine answers (Docker Desktop, or kafka/docker/engine.sh up as root)"
  if [ -n "$(docker ps -q --filter "label=com.docker.compose.project=$WORKSHOP_PROJECT")" ]; then
    die "the hub of $WORKSHOP_PROJECT runs already (make workshop-down stops it)"
  fi
  write_secrets
  build_images
  local t0=$SECONDS host=$WORKSHOP_IP probe=$WORKSHOP_IP url
  # every interface: the URL names this host, and so does a self-signed certificate
  if [ "$host" = 0.0.0.0 ]; then host=$(hostname -f 2>/dev/null || hostname); probe=127.0.0.1; fi
  export WORKSHOP_TLS_NAME=${WORKSHOP_TLS_NAME:-$host}
  compose up -d --no-build hub >&2
  url="$(scheme)://$host:$WORKSHOP_PORT"
  wait_for_hub "$(scheme)://$probe:$WORKSHOP_PORT/hub/api" || { cmd_down; exit 1; }
  say "hub answering after $((SECONDS - t0)) s"
  cat <<EOF
The workshop hub: $url/hub/login
  learners: any name, the password in $WORKSHOP_SECRETS/learner-password
  instructor: ${WORKSHOP_ADMIN_USER:-instructor}, the password in $WORKSHOP_SECRETS/admin-password (admin page: $url/hub/admin)
  stop: make workshop-down (the learners' notebooks stay; make workshop-clean removes them)
EOF
}

project_containers() { docker ps -aq --filter "label=$LABEL=$WORKSHOP_PROJECT"; }

cmd_down() {
  local left
  # the hub first: on SIGTERM it stops every learner's lab (cleanup_servers), which DockerSpawner removes
  compose stop -t 300 hub >&2 || true
  left=$(project_containers)
  if [ -n "$left" ]; then
    say "removing learners' labs the hub left: $(echo "$left" | wc -l)"
    echo "$left" | xargs docker stop -t 60 >/dev/null 2>&1 || true
    echo "$left" | xargs docker rm -f >/dev/null 2>&1 || true
  fi
  compose down -v --remove-orphans >&2
  left="$(project_containers)$(docker ps -aq --filter "label=com.docker.compose.project=$WORKSHOP_PROJECT")$(docker network ls -q --filter "name=^${WORKSHOP_PROJECT}\$")"
  [ -z "$left" ] || { say "left after down: $left"; exit 1; }
  say "stopped: no container or network of $WORKSHOP_PROJECT left (the learners' notebook volumes stay)"
}

notebook_volumes() { docker volume ls -q --filter "name=^${WORKSHOP_PROJECT}-notebooks-" | grep "^${WORKSHOP_PROJECT}-notebooks-" || true; }

cmd_clean() {
  cmd_down
  local volumes; volumes=$(notebook_volumes)
  [ -z "$volumes" ] || echo "$volumes" | xargs docker volume rm >/dev/null
  say "removed $(echo -n "$volumes" | grep -c . || true) notebook volume(s) of $WORKSHOP_PROJECT"
}

cmd_status() {
  docker ps --filter "label=com.docker.compose.project=$WORKSHOP_PROJECT" --format '{{.Names}}\t{{.Status}}'
  docker ps --filter "label=$LABEL=$WORKSHOP_PROJECT" --format '{{.Names}}\t{{.Status}}'
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  clean) cmd_clean ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|clean|status" >&2; exit 2 ;;
esac
