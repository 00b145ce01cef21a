#!/usr/bin/env bash
# schemathesis, the property-based API tester that checks the live server against
# control-plane/openapi.json (tests/system/openapi.rs runs it). Installed from PyPI into a venv
# cached outside the checkout, so CI reuses it between runs on one machine.
#
#   scripts/schemathesis.sh install    create the venv and install schemathesis if not there yet
#   scripts/schemathesis.sh path       print the `schemathesis` executable's path; exit 1 if absent
#
# The cache dir: see scripts/venv-tool.sh.
set -euo pipefail
# shellcheck source=venv-tool.sh
. "$(dirname "$0")/venv-tool.sh"

VERSION=4.32.5
ROOT="$TOOLS_DIR/schemathesis-$VERSION"
BIN="$ROOT/bin/schemathesis"

install() {
  if [ -x "$BIN" ]; then return 0; fi
  venv_tool_install "$ROOT" "schemathesis==$VERSION"
}

venv_tool_cli "$0" "$BIN" "$@"
