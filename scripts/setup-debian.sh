#!/usr/bin/env bash
# Installs what Rakazo needs on a fresh Debian 12 machine: build tools, the musl target for the
# static guest, and the computer-image packages used by the tests (TigerVNC's Xvnc, Chromium), with
# Xvfb and x11vnc for the benchmarks' anchor ("x11vnc on Xvfb").
# Local computers are contained with iproute2 (network namespaces), nftables and bubblewrap;
# libnss3-tools (certutil) puts their egress CA into Chrome's store (secrets).
# ffmpeg encodes `rakazo recording export` videos (and its ffprobe checks them in the tests).
# Idempotent and quiet; safe to run again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

need_pkgs=()
for p in build-essential pkg-config musl-tools file iproute2 nftables bubblewrap procps curl tigervnc-standalone-server xvfb xauth chromium x11vnc novnc xdotool scrot imagemagick x11-utils fonts-liberation postgresql zstd xclip libnss-wrapper libnss3-tools ffmpeg; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "cargo is missing: install Rust with rustup first" >&2
  exit 1
fi
rustup target list --installed 2>/dev/null | grep -q x86_64-unknown-linux-musl \
  || rustup target add x86_64-unknown-linux-musl >/dev/null
# The live terminal page's xterm.js (docs/screens.md#terminal) and the console's htm + Preact
# (docs/console.md), pinned by the committed package-lock and served by `rakazo serve`: nothing
# is fetched at run time. The console's browser test (tests/console: playwright-core driving
# /usr/bin/chromium, axe-core) is pinned the same way.
root="$(cd "$(dirname "$0")/.." && pwd)"
npm_ci() {
  if ! command -v npm >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq npm >/dev/null
  fi
  (cd "$1" && npm ci --no-audit --no-fund --silent)
}
web="$root/control-plane/web"
if [ ! -f "$web/node_modules/@xterm/xterm/lib/xterm.js" ] \
  || [ ! -f "$web/node_modules/htm/preact/standalone.module.js" ]; then
  npm_ci "$web"
fi
console_tests="$root/tests/console"
if [ ! -f "$console_tests/node_modules/playwright-core/package.json" ] \
  || [ ! -f "$console_tests/node_modules/axe-core/axe.min.js" ]; then
  npm_ci "$console_tests"
fi
# The reference Prometheus text parser the metrics tests read /metrics with
# (tests/scripts/parse_metrics.py): PyPI's prometheus_client, or Debian's package where pip may
# not install into the system Python.
if ! python3 -c 'import prometheus_client' 2>/dev/null; then
  python3 -m pip install --quiet prometheus_client 2>/dev/null || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq python3-prometheus-client >/dev/null
  }
fi
# The official MCP Python client the MCP system test drives the server with
# (tests/scripts/mcp_client.py): PyPI's `mcp`, pinned, in a venv cached outside the checkout
# (tests/system/mcp.rs looks for it there, or at RAKAZO_MCP_PYTHON).
mcp_venv="${HOME}/.cache/rakazo/mcp-venv"
if ! "$mcp_venv/bin/python" -c 'import mcp' 2>/dev/null; then
  # Debian's python3 makes venvs only with python3-venv installed.
  python3 -m venv "$mcp_venv" 2>/dev/null || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$mcp_venv"
  }
  "$mcp_venv/bin/pip" install --quiet 'mcp==2.3.0'
fi
