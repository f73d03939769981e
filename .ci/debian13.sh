#!/usr/bin/env bash
# A second distribution, as a plain user (issue 33): a Debian 13 (trixie) root made with
# debootstrap, with only what README tells a Debian 13 user to install, where a user who is not
# root clones this commit and follows README: `make check` (Python alone, before anything fetches
# the jars), `make setup`, then `kafkalab up` on a port base of its own, notebooks 00 and 03 under
# nbval, a Spark audit of a live topic, `kafkalab down`, and no process left in the root.
#
# Needs root (debootstrap, chroot, mounts) and apt. Where either is missing it says so in one line
# and exits 0, unless CI is set: on CI this slice must run, and a skip is a failure.
#
# The root is cached outside the clone ($KAFKALAB_DEBIAN13_CACHE, default /var/cache/kafkalab),
# rebuilt when the package set or this recipe changes (a stamp), and built beside the cache then
# renamed into place, so an interrupted build never leaves a half-built root in use. The
# learner's pip and Maven downloads stay in the cached root's home (a second run fetches
# nothing); the clone, its .venv and its .kafkalab are made anew every run.
#
# Everything runs in a mount and UTS namespace of its own: the mounts (proc, sys, dev) end with
# it even if this script is killed, and the root gets a host name that does not resolve (as on
# many laptops, VPNs and containers), so Spark must start without it. The trap still stops every
# process left in the root and unmounts everything, on success and failure alike.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${KAFKALAB_DEBIAN13_CACHE:-/var/cache/kafkalab}
ROOT=$CACHE/debian13-root
SUITE=trixie
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security
# What README tells a Debian 13 user to install, and one extra: ca-certificates (the system trust
# store, which pip's requests and Java's keystore, through ca-certificates-java, read; the
# machine's own CA certificates are added to it before it is built, see copy_trust_store).
PACKAGES=(python3 python3-venv openjdk-21-jdk-headless maven make git ca-certificates)
# Bump when the way the root is built changes: the stamp then no longer matches and it is rebuilt.
RECIPE=1
LEARNER=learner
LEARNER_UID=1013           # not 1000: on this machine uid 1000 is a host user (and the compose
                           # image's appuser), which would blur the no-process-left check
LEARNER_HOME=/home/$LEARNER
PORT_BASE=30092            # 30092..30297: not make test's 9092/10092
HOSTNAME_IN_ROOT=kafkalab-debian13-learner

say() { echo "debian13: $*"; }

on_ci() { [ -n "${CI:-}" ] && [ "${CI}" != false ] && [ "${CI}" != 0 ]; }

# One line, and exit 0 off CI; on CI a skip is a failure.
cannot_run() {
  if on_ci; then
    say "cannot run: $1; on CI (CI=$CI) this slice must run"
    say "0 passed, 1 failed"
    exit 1
  fi
  say "skipped: $1 (CI runs it as root with apt)"
  exit 0
}

if [ -z "${_KAFKALAB_DEBIAN13_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || cannot_run "needs root (debootstrap, chroot, mounts); you are uid $(id -u)"
  command -v apt-get >/dev/null || cannot_run "needs apt-get (a Debian or Ubuntu host) to install debootstrap"
  for tool in unshare chroot flock git; do
    command -v "$tool" >/dev/null || cannot_run "needs $tool"
  done
  if ! command -v debootstrap >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq debootstrap >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; } \
      || cannot_run "could not install debootstrap with apt-get"
  fi
  mkdir -p "$CACHE"
  # Two runs at once (two checkouts on one machine) would share the root: one at a time.
  exec 9>"$CACHE/debian13.lock"
  flock -w 3600 9 || cannot_run "another run held $CACHE/debian13.lock for an hour"
  _KAFKALAB_DEBIAN13_NS=1 exec unshare --mount --uts --propagation private -- bash "$0" "$@"
fi

# ---- from here on: root, in a private mount and UTS namespace ----------------------------------
ROOT=$(readlink -f "$ROOT")
hostname "$HOSTNAME_IN_ROOT"

NAMES=() SECS=() RESULTS=()
record() { NAMES+=("$1"); SECS+=("$2"); RESULTS+=("$3"); say "$1: $3 ($2 s)"; }

# Processes whose root is the Debian root (any user): the check after `kafkalab down`, and the
# trap's last resort.
root_pids() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    case "$r" in "$1"|"$1"/*) echo "${p#/proc/}";; esac
  done
}

# Waits up to $1 seconds for command $2... to succeed, polling every 0.2 s.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
none_left() { [ -z "$(root_pids "$1")" ]; }

stop_root_procs() {
  local dir=$1 pids
  pids=$(root_pids "$dir")
  [ -n "$pids" ] || return 0
  say "stopping processes left in $dir: $(echo $pids)"
  kill -TERM $pids 2>/dev/null || true
  wait_until 20 none_left "$dir" && return 0
  kill -KILL $(root_pids "$dir") 2>/dev/null || true
  wait_until 10 none_left "$dir" || say "processes still in $dir: $(echo $(root_pids "$dir"))"
}

# Every mount at or below $1, deepest first.
unmount_below() {
  local m
  for m in $(awk -v r="$1" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" || say "could not unmount $m"
  done
}

remove_root() {
  [ -e "$1" ] || return 0
  stop_root_procs "$1"
  unmount_below "$1"
  rm -rf --one-file-system "$1"
}

cleanup() {
  local rc=$?
  for dir in "$ROOT" "$ROOT.new"; do
    stop_root_procs "$dir"
    unmount_below "$dir"
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_root() {
  local dir=$1
  mount -t proc proc "$dir/proc"
  mount -t sysfs -o ro sysfs "$dir/sys"
  mount --rbind /dev "$dir/dev"
}

in_root() { chroot "$1" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "${PROXY_ENV[@]}" "${@:2}"; }

# Proxy settings of this machine, if any, for apt and for the learner.
PROXY_ENV=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && PROXY_ENV+=("$v=${!v}")
done

# The machine's own CA certificates (/usr/local/share/ca-certificates, where Debian keeps local
# ones) into the root's, then update-ca-certificates there: it writes the root's
# /etc/ssl/certs/ca-certificates.crt (Debian's set plus these, as the machine's own bundle is) and,
# through ca-certificates-java's hook, Java's keystore, which Maven uses. Returns 0 if it changed.
copy_trust_store() {
  local dir=$1 src=/usr/local/share/ca-certificates dst
  dst=$dir/usr/local/share/ca-certificates
  mkdir -p "$dst"
  if [ -d "$src" ] && diff -rq "$src" "$dst" >/dev/null 2>&1; then return 1; fi
  rm -rf "${dst:?}"/*
  [ -d "$src" ] && cp -a "$src"/. "$dst"/
  return 0
}

# The machine's package-client settings: apt's proxy and validity checks, pip's configuration
# files (pip reads /etc/pip.conf, /etc/xdg/pip/pip.conf and the user's ~/.config/pip/pip.conf,
# ~/.pip/pip.conf), Maven's ~/.m2/settings.xml. The PIP_* variables go to the learner's
# environment (learner_env); a folder one names (PIP_FIND_LINKS=/opt/wheels) is bind-mounted
# read-only where the root lacks it.
copy_apt_settings() {
  apt-config dump 2>/dev/null | grep -E '^Acquire::((https?|ftp)::)?Proxy|^Acquire::Check-(Valid-Until|Date)' \
    > "$1/etc/apt/apt.conf.d/90kafkalab-host" || true
}
copy_client_settings() {
  local dir=$1 home=$1$LEARNER_HOME f
  for f in /etc/pip.conf /etc/xdg/pip/pip.conf; do
    if [ -f "$f" ]; then mkdir -p "$dir$(dirname "$f")"; cp "$f" "$dir$f"; else rm -f "$dir$f"; fi
  done
  rm -f "$home/.config/pip/pip.conf" "$home/.m2/settings.xml"
  for f in "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
    [ -f "$f" ] && { install -d -o "$LEARNER_UID" -g "$LEARNER_UID" "$home/.config" "$home/.config/pip"
                     install -m 644 -o "$LEARNER_UID" -g "$LEARNER_UID" "$f" "$home/.config/pip/pip.conf"; break; }
  done
  if [ -f "$HOME/.m2/settings.xml" ]; then
    install -d -o "$LEARNER_UID" -g "$LEARNER_UID" "$home/.m2"
    install -m 644 -o "$LEARNER_UID" -g "$LEARNER_UID" "$HOME/.m2/settings.xml" "$home/.m2/settings.xml"
  fi
  local v p
  for v in $(compgen -e | grep '^PIP_' || true); do
    for p in ${!v}; do
      case "$p" in /*) if [ -d "$p" ] && [ ! -e "$dir$p" ]; then
        mkdir -p "$dir$p"; mount --bind -o ro "$p" "$dir$p"; fi;; esac
    done
  done
}

# ---- 1. the root ---------------------------------------------------------------------------------
stamp_text() {
  printf 'recipe %s\nsuite %s\nmirror %s %s\npackages %s\nlearner %s %s\n' "$RECIPE" "$SUITE" "$MIRROR" \
    "$SECURITY_MIRROR" "$(printf '%s\n' "${PACKAGES[@]}" | sort | tr '\n' ' ')" "$LEARNER" "$LEARNER_UID"
}
STAMP=$(stamp_text)

build_root() {
  local new=$ROOT.new
  remove_root "$new"                      # a build that was interrupted
  say "building the Debian 13 root in $new (debootstrap $SUITE from $MIRROR)"
  debootstrap --variant=minbase "$SUITE" "$new" "$MIRROR" > "$CACHE/debian13-debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debian13-debootstrap.log"; return 1; }
  cat > "$new/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -f "$new/etc/apt/sources.list"
  copy_apt_settings "$new"
  copy_trust_store "$new" || true
  cp /etc/resolv.conf "$new/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' > "$new/usr/sbin/policy-rc.d"; chmod 755 "$new/usr/sbin/policy-rc.d"
  # openjdk's post-install step runs java, which wants /proc.
  mount_root "$new"
  in_root "$new" apt-get update -qq
  say "installing ${PACKAGES[*]} (apt's defaults, recommends included, as a user's apt install)"
  in_root "$new" apt-get install -y -q "${PACKAGES[@]}" > "$CACHE/debian13-apt.log" 2>&1 \
    || { tail -30 "$CACHE/debian13-apt.log"; return 1; }
  in_root "$new" update-ca-certificates >/dev/null
  in_root "$new" apt-get clean
  rm -f "$new/usr/sbin/policy-rc.d"
  in_root "$new" useradd --create-home --uid "$LEARNER_UID" --user-group --shell /bin/bash "$LEARNER"
  unmount_below "$new"
  echo "$STAMP" > "$new/.kafkalab-stamp"
  remove_root "$ROOT"
  mv "$new" "$ROOT"
}

t0=$SECONDS
if [ -f "$ROOT/.kafkalab-stamp" ] && [ "$(cat "$ROOT/.kafkalab-stamp")" = "$STAMP" ]; then
  how=cached
else
  [ -e "$ROOT" ] && say "the cached root's stamp differs from this package set: rebuilding it"
  how=built
  if ! build_root; then
    record "root ($SUITE, built)" $((SECONDS - t0)) FAILED
    say "0 passed, 1 failed"
    exit 1
  fi
fi
# Every run: a previous run's leftovers out, this machine's settings in (they may have changed).
stop_root_procs "$ROOT"
unmount_below "$ROOT"
rm -rf --one-file-system "${ROOT:?}$LEARNER_HOME/kafkalab" "$ROOT/srv/kafkalab.bundle"   # an interrupted run's
find "$ROOT/tmp" "$ROOT/var/tmp" -mindepth 1 -xdev -delete 2>/dev/null || true
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$ROOT/etc/hosts"
echo "$HOSTNAME_IN_ROOT" > "$ROOT/etc/hostname"
copy_apt_settings "$ROOT"
mount_root "$ROOT"
if copy_trust_store "$ROOT"; then in_root "$ROOT" update-ca-certificates --fresh >/dev/null; fi
copy_client_settings "$ROOT"
record "root ($SUITE, $how)" $((SECONDS - t0)) ok
say "in the root: $(in_root "$ROOT" python3 --version 2>&1), $(in_root "$ROOT" java -version 2>&1 | head -1), $(in_root "$ROOT" mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g'), $(in_root "$ROOT" git --version)"
if in_root "$ROOT" getent hosts "$HOSTNAME_IN_ROOT" >/dev/null; then
  say "note: the host name $HOSTNAME_IN_ROOT resolves in the root"
else
  say "the root's host name $HOSTNAME_IN_ROOT does not resolve (Spark must start without it)"
fi

# ---- 2. as the learner ---------------------------------------------------------------------------
SHA=$(git -C "$REPO" rev-parse HEAD)
git -C "$REPO" bundle create -q "$ROOT/srv/kafkalab.bundle" HEAD 2>/dev/null \
  || git -C "$REPO" bundle create "$ROOT/srv/kafkalab.bundle" HEAD
chmod 644 "$ROOT/srv/kafkalab.bundle"

LEARNER_ENV=(HOME="$LEARNER_HOME" USER="$LEARNER" LOGNAME="$LEARNER" SHELL=/bin/bash LANG=C.UTF-8
             PATH=/usr/local/bin:/usr/bin:/bin KAFKALAB_PORT_BASE="$PORT_BASE" "${PROXY_ENV[@]}")
for v in $(compgen -e | grep -E '^(PIP_|MAVEN_OPTS$|MAVEN_ARGS$)' || true); do LEARNER_ENV+=("$v=${!v}"); done

# as_learner SECONDS COMMAND: COMMAND in bash as the learner, in ~/kafkalab once it exists. In the
# background with `wait`, so that a TERM to this script runs the trap at once, not after the step.
as_learner() {
  local limit=$1 pid; shift
  timeout --kill-after=30 "$limit" chroot "$ROOT" /usr/sbin/runuser -u "$LEARNER" -- \
    /usr/bin/env -i "${LEARNER_ENV[@]}" /bin/bash -c "cd ~ && { [ ! -d kafkalab ] || cd kafkalab; } && $*" </dev/null &
  pid=$!
  wait "$pid"
}

failed=0
step() {   # step NAME SECONDS COMMAND
  local name=$1 limit=$2 t=$SECONDS rc=0; shift 2
  say "--- $name: $*"
  as_learner "$limit" "$@" || rc=$?
  if [ "$rc" = 0 ]; then record "$name" $((SECONDS - t)) ok
  else record "$name" $((SECONDS - t)) "FAILED (exit $rc$([ "$rc" = 124 ] && echo ", timed out after $limit s"))"; failed=1; fi
  return "$rc"
}

say "as $LEARNER (uid $LEARNER_UID), commit ${SHA:0:12}, KAFKALAB_PORT_BASE=$PORT_BASE"
if step clone 120 "git -c init.defaultBranch=main -c advice.detachedHead=false clone -q /srv/kafkalab.bundle kafkalab && cd kafkalab && git -c advice.detachedHead=false checkout -q --detach $SHA && test \"\$(git rev-parse HEAD)\" = $SHA && id && git log -1 --format='%h %s' | cut -c1-100"; then
  # A failed test of make check does not stop the slice (one run shows every failure); a failed
  # set-up (no .venv, no jars) makes kafkalab up fail at once. make check needs Python alone, so
  # the jars come after it (make setup: the venv is there already).
  step "make check" 2700 "make check" || true
  step "make setup" 1800 "make setup" || true
  up_ok=0
  step "kafkalab up" 600 ".venv/bin/kafkalab up" && up_ok=1
  if [ "$up_ok" = 1 ]; then
    step "notebooks 00, 03 (nbval)" 1800 ".venv/bin/pytest --nbval-lax --nbval-cell-timeout=300 -p no:cacheprovider --capture=sys notebooks/00_cluster_tour.ipynb notebooks/03_offset_commit.ipynb" || true
    # A live topic read by Spark against what confluent-kafka's producer had acknowledged (every
    # acked record at its partition and offset: no lost write, no duplicate), the driver's
    # listening sockets (loopback only), and the Jepsen checks of kafkalab.audit, one planted
    # anomaly of each kind (the rest of tests/test_audit.py adds 2 minutes and no platform).
    step "Spark audit" 900 ".venv/bin/pytest -m spark -p no:cacheprovider --capture=sys -q tests/test_spark.py tests/test_audit.py::test_summary_counts_one_planted_anomaly_of_each_kind" || true
  fi
  # down even after a failed up: no broker of a failed start outlives the slice
  step "kafkalab down" 300 ".venv/bin/kafkalab down" || true
  t=$SECONDS
  if wait_until 30 none_left "$ROOT"; then
    record "no process left in the root" $((SECONDS - t)) ok
  else
    say "left in the root after kafkalab down:"
    for p in $(root_pids "$ROOT"); do ps -o pid=,user=,args= -p "$p" | cut -c1-200; done
    record "no process left in the root" $((SECONDS - t)) FAILED
    failed=1
  fi
fi

# The clone (its .venv alone is 1.5 GB) goes now, not at the next run's start, so that the root
# step times only the root. The downloads (~/.cache/pip, ~/.m2) stay for the next run.
t=$SECONDS
rm -rf --one-file-system "${ROOT:?}$LEARNER_HOME/kafkalab" "$ROOT/srv/kafkalab.bundle"
say "removed the clone ($((SECONDS - t)) s)"

passed=0 nfailed=0 line=""
for i in "${!NAMES[@]}"; do
  case "${RESULTS[$i]}" in ok) passed=$((passed + 1));; *) nfailed=$((nfailed + 1));; esac
  line+="${line:+, }${NAMES[$i]} ${SECS[$i]} s"
  [ "${RESULTS[$i]}" = ok ] || line+=" ${RESULTS[$i]}"
done
say "Debian 13 as $LEARNER: $line; total $((SECONDS - t0)) s"
say "$passed passed, $nfailed failed"
[ "$failed" = 0 ] && [ "$nfailed" = 0 ]
