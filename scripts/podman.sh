#!/usr/bin/env bash
# A Docker-Engine-compatible API served by podman, for the docker provider and its tests.
#
#   bash scripts/podman.sh install          apt-get install podman, runc, catatonit if missing
#   bash scripts/podman.sh start [NAME]     start the service unless one answers; print its socket
#   bash scripts/podman.sh sock [NAME]      print the socket path
#   bash scripts/podman.sh stop [NAME]      stop the service this script started
#   bash scripts/podman.sh kill [NAME]      SIGKILL it (an engine that dies; its containers live on)
#
# Without NAME (or $RAKAZO_PODMAN_INSTANCE) this is the host's podman: its usual storage. A named
# instance is a second engine (tests run computers on several): its own image and container
# storage in $dir/storage (kept, so images are imported once), its run state on tmpfs in
# /run/rakazo-podman-NAME, and its own mount namespace with a private /dev/shm, where podman keeps
# its locks, so the two never share a lock, a container or an image.
#
# State lives in $RAKAZO_PODMAN_DIR (default /var/tmp/rakazo-podman, or /var/tmp/rakazo-podman-NAME):
# containers.conf, podman.sock, service.log, service.pid. Idempotent: `start` twice leaves one
# service.
set -euo pipefail

instance="${2:-${RAKAZO_PODMAN_INSTANCE:-}}"
case "$instance" in
  "") dir="${RAKAZO_PODMAN_DIR:-/var/tmp/rakazo-podman}" ;;
  *[!a-z0-9]*) echo "podman.sh: instance name $instance: use a-z and 0-9 only" >&2; exit 1 ;;
  *) dir="${RAKAZO_PODMAN_DIR:-/var/tmp/rakazo-podman-$instance}" ;;
esac
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
  # Podman spools every image load through the Engine API (`POST /images/load`, how the docker
  # provider copies the image to an engine that lacks it) into a temp file under $TMPDIR
  # (/var/tmp when unset) and leaves it there when the service dies mid-load, 1.3 GB each (the
  # lost-engine test kills one). Its own directory instead, emptied here: no service runs on
  # this directory now, so what a dead one spooled is garbage.
  rm -rf "$dir/tmp"
  mkdir -p "$dir/tmp"
  # A stale socket from a dead service would make podman refuse to bind.
  rm -f "$sock"
  # The service, and every conmon it starts, keeps the caller's working directory: one removed
  # later (a CI checkout replaced by a fresh clone) fails each container start with conmon's
  # "Failed to get working directory" (the API says `write child: broken pipe`). Start from /.
  cd /
  if [ -z "$instance" ]; then
    CONTAINERS_CONF="$conf" TMPDIR="$dir/tmp" setsid nohup podman system service --time 0 "unix://$sock" \
      >>"$log" 2>&1 </dev/null &
  else
    # The exit command conmon runs when a container stops gets --root, --runroot and --tmpdir
    # from the service, and runs in this namespace, so it sees the same locks.
    local run="/run/rakazo-podman-$instance"
    mkdir -p "$dir/storage" "$run"
    CONTAINERS_CONF="$conf" TMPDIR="$dir/tmp" setsid nohup unshare --mount --propagation private sh -c \
      'mount -t tmpfs -o mode=1777,size=64m shm /dev/shm && exec "$@"' sh \
      podman --root "$dir/storage" --runroot "$run/run" --tmpdir "$run/tmp" \
      system service --time 0 "unix://$sock" >>"$log" 2>&1 </dev/null &
  fi
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

# The engine dies at once, as with a crashed host: no clean shutdown. Its containers keep running
# under their conmon until something stops them.
kill_service() {
  [ -f "$pidfile" ] || die "no service started by this script ($pidfile is missing)"
  kill -9 "$(cat "$pidfile")" 2>/dev/null || true
  rm -f "$pidfile"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  sock) echo "$sock" ;;
  stop) stop ;;
  kill) kill_service ;;
  *) die "usage: $0 install|start|sock|stop|kill [INSTANCE]" ;;
esac
