#!/usr/bin/env bash
# A Docker-Engine-compatible API served by podman, for the docker provider and its tests.
#
#   bash scripts/podman.sh install   apt-get install podman, runc, catatonit if missing
#   bash scripts/podman.sh start     start the service unless one answers; print the socket path
#   bash scripts/podman.sh sock      print the socket path
#   bash scripts/podman.sh stop      stop the service this script started
#
# State lives in $RAKAZO_PODMAN_DIR (default /var/tmp/rakazo-podman): containers.conf,
# podman.sock, service.log, service.pid. Idempotent: `start` twice leaves one service.
set -euo pipefail

dir="${RAKAZO_PODMAN_DIR:-/var/tmp/rakazo-podman}"
sock="$dir/podman.sock"
conf="$dir/containers.conf"
log="$dir/service.log"
pidfile="$dir/service.pid"

die() { echo "podman.sh: $*" >&2; exit 1; }

sudo_if_needed() { if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi; }

install() {
  local need=() p
  for p in podman runc catatonit; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [ "${#need[@]}" -eq 0 ] && return 0
  export DEBIAN_FRONTEND=noninteractive
  sudo_if_needed apt-get update -qq
  sudo_if_needed apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

pinging() {
  [ -S "$sock" ] || return 1
  [ "$(curl -s --max-time 2 --unix-socket "$sock" http://d/_ping 2>/dev/null)" = OK ]
}

write_conf() {
  # crun fails here (rlimits under hybrid cgroups), so runc. Soft and hard limits must be equal:
  # podman 4.3 swaps unequal ones on containers created through the API. nproc counts every
  # process of the container's uid on the host, so root containers need headroom.
  local tmp="$conf.tmp.$$"
  cat >"$tmp" <<'EOF'
# Written by scripts/podman.sh; rewritten on every start.
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=8192:8192"]

[engine]
runtime = "runc"
EOF
  mv -f "$tmp" "$conf"
}

start() {
  mkdir -p "$dir"
  chmod 0700 "$dir"
  if pinging; then
    echo "$sock"
    return 0
  fi
  command -v podman >/dev/null || die "podman is not installed: run 'bash scripts/podman.sh install'"
  command -v runc >/dev/null || die "runc is not installed: run 'bash scripts/podman.sh install'"
  write_conf
  # A stale socket from a dead service would make podman refuse to bind.
  rm -f "$sock"
  CONTAINERS_CONF="$conf" setsid nohup podman system service --time 0 "unix://$sock" \
    >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if pinging; then
      echo "$sock"
      return 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      rm -f "$pidfile"
      echo "podman.sh: the podman service exited before answering on $sock; last log lines of $log:" >&2
      tail -n 20 "$log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  echo "podman.sh: the podman service (pid $(cat "$pidfile")) did not answer on $sock within 10 s; last log lines of $log:" >&2
  tail -n 20 "$log" >&2 || true
  exit 1
}

stop() {
  local pid
  if [ -f "$pidfile" ]; then
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$pidfile"
  elif pinging; then
    die "a service answers on $sock but was not started by this script (no $pidfile)"
  fi
  rm -f "$sock"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  sock) echo "$sock" ;;
  stop) stop ;;
  *) die "usage: $0 install|start|sock|stop" ;;
esac
