#!/usr/bin/env bash
# vncdotool, a third-party RFB (VNC) client from PyPI (Twisted and Pillow underneath), that
# tests/system/rfb_client.rs drives view and control capability URLs with: a client that is not
# ours, to show that a viewer sees the screen and cannot inject input. Installed into a venv
# cached outside the checkout, so CI reuses it between runs on one machine.
#
#   scripts/vncdotool.sh install    create the venv and install vncdotool if not there yet
#   scripts/vncdotool.sh path       print the venv's `python`; exit 1 if absent
#
# The cache dir: see scripts/venv-tool.sh.
set -euo pipefail
# shellcheck source=venv-tool.sh
. "$(dirname "$0")/venv-tool.sh"

VERSION=1.4.2
ROOT="$TOOLS_DIR/vncdotool-$VERSION"
PY="$ROOT/bin/python"

install() {
  if [ -x "$PY" ] && "$PY" -c 'import vncdotool.api' 2>/dev/null; then return 0; fi
  venv_tool_install "$ROOT" "vncdotool==$VERSION"
}

venv_tool_cli "$0" "$PY" "$@"
