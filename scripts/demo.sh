#!/usr/bin/env bash
# The main job: install what is needed, build, start the control plane on SQLite with a local
# computer, and show it working through the CLI. The server keeps running until Ctrl-C
# (set RAKAZO_DEMO_EXIT=1 to stop right after the tour).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
cargo build --release --bins --locked -p control-plane -p guest-agent
BIN="${CARGO_TARGET_DIR:-target}/release"
export RAKAZO_DATA_DIR="${RAKAZO_DATA_DIR:-$PWD/.rakazo-demo}"
export RAKAZO_HTTP_ADDR="${RAKAZO_HTTP_ADDR:-127.0.0.1:7090}" RAKAZO_TUNNEL_ADDR="${RAKAZO_TUNNEL_ADDR:-127.0.0.1:7443}"
mkdir -p "$RAKAZO_DATA_DIR"
rm -f "$RAKAZO_DATA_DIR/addresses.json"
"$BIN/rakazo" serve >>"$RAKAZO_DATA_DIR/server.log" 2>&1 &
SERVER=$!
ID=""
# On exit, stop the demo computer (its guest outlives the server otherwise), then the server.
trap '[ -n "$ID" ] && "$BIN/rakazo" computer stop "$ID" >/dev/null 2>&1; kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -f "$RAKAZO_DATA_DIR/addresses.json" ] && break; sleep 0.1; done
[ -f "$RAKAZO_DATA_DIR/addresses.json" ] || { echo "the server did not start; see $RAKAZO_DATA_DIR/server.log" >&2; exit 1; }
rk() { echo "+ rakazo $*" >&2; "$BIN/rakazo" "$@"; }

echo "== control plane on SQLite at $RAKAZO_HTTP_ADDR (data dir $RAKAZO_DATA_DIR)"
ID=$(rk computer create --workspace demo --json | sed -n 's/.*"id": "\(c-[0-9a-f]*\)".*/\1/p')
rk computer list
rk exec "$ID" -- sh -c 'echo "hello from $(hostname) as $(id -un), in $PWD"; uname -sr'
printf '#!/bin/sh\necho "a script uploaded through the tunnel, args: $*"\n' > "$RAKAZO_DATA_DIR/hello.sh"
rk files put "$ID" "$RAKAZO_DATA_DIR/hello.sh" bin/hello.sh --executable
rk files ls "$ID" bin
rk exec "$ID" -- bin/hello.sh one two
LEASE=$(rk lease acquire "$ID" bot-1 --owner run-1 --json | sed -n 's/.*"lease": "\([^"]*\)".*/\1/p')
rk exec "$ID" --bot bot-1 --lease "$LEASE" -- sh -c 'echo "running for bot-1 under lease $0"' "$LEASE"
rk screen ensure "$ID" bot-1 --lease "$LEASE"        # bot-1's own X display and Chrome
rk lease release "$ID" bot-1 "$LEASE"                # the run ends: its home is checkpointed
rk home show "$ID"
rk home ls "$ID" bin                                 # read from the stored checkpoint
VIEW=$(rk screen url "$ID" bot-1 --json | sed -n 's/.*"url": "\([^"]*\)".*/\1/p')
set +e
rk exec "$ID" --timeout-ms 500 -- sh -c 'sleep 100 & sleep 100; echo never'
echo "(exit $? : the whole process tree was killed)"
set -e
echo
echo "The control plane is running: try  RAKAZO_DATA_DIR=$RAKAZO_DATA_DIR $BIN/rakazo exec $ID -- ls -la"
[ -n "$VIEW" ] && echo "Watch bot-1's desktop in a browser (a view-only link, valid 60 minutes): $VIEW"
# A token for a person, limited to the demo's workspace, kept in a 0600 file (never argv or a URL).
( umask 077; "$BIN/rakazo" token create --role operator --workspace demo --expires 1d --name demo \
    > "$RAKAZO_DATA_DIR/console-token" 2>/dev/null )
echo "The console: open http://$RAKAZO_HTTP_ADDR/console and sign in with the operator token in"
echo "  $RAKAZO_DATA_DIR/console-token   (or the server's admin token, $RAKAZO_DATA_DIR/api-token)"
if [ "${RAKAZO_DEMO_EXIT:-0}" = 1 ]; then exit 0; fi
echo "Ctrl-C stops it."
wait $SERVER
