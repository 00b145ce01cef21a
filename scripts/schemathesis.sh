#!/usr/bin/env bash
# schemathesis, the property-based API tester that checks the live server against
# control-plane/openapi.json (tests/system/openapi.rs runs it). Installed from PyPI into a venv
# cached outside the checkout, so CI reuses it between runs on one machine.
#
#   scripts/schemathesis.sh install    create the venv and install schemathesis if not there yet
#   scripts/schemathesis.sh path       print the `schemathesis` executable's path; exit 1 if absent
#
# The cache dir is $RAKAZO_TOOLS_DIR, else $XDG_CACHE_HOME/rakazo/tools, else
# ~/.cache/rakazo/tools (as scripts/s3s-fs.sh).
set -euo pipefail

VERSION=4.32.5
TOOLS_DIR="${RAKAZO_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rakazo/tools}"
ROOT="$TOOLS_DIR/schemathesis-$VERSION"
BIN="$ROOT/bin/schemathesis"

install() {
  if [ -x "$BIN" ]; then return 0; fi
  echo "installing schemathesis $VERSION into $ROOT" >&2
  rm -rf "$ROOT"
  if ! python3 -m venv "$ROOT" 2>/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$ROOT"
  fi
  "$ROOT/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$VERSION"
}

case "${1:-}" in
  install) install ;;
  path)
    if [ -x "$BIN" ]; then echo "$BIN"; else
      echo "schemathesis is not installed: run scripts/schemathesis.sh install" >&2; exit 1
    fi
    ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
