# Sourced by the scripts that install a PyPI tool into a venv cached outside the checkout
# (scripts/schemathesis.sh, scripts/vncdotool.sh): the cache directory and the install step.
#
# The cache dir is $RAKAZO_TOOLS_DIR, else $XDG_CACHE_HOME/rakazo/tools, else
# ~/.cache/rakazo/tools (as scripts/s3s-fs.sh).
TOOLS_DIR="${RAKAZO_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rakazo/tools}"

# venv_tool_install ROOT REQUIREMENT: a fresh venv at ROOT with REQUIREMENT (`name==version`)
# installed from PyPI. Debian's python3 makes venvs only with python3-venv installed.
venv_tool_install() {
  local root="$1" requirement="$2"
  echo "installing $requirement into $root" >&2
  rm -rf "$root"
  if ! python3 -m venv "$root" 2>/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$root"
  fi
  "$root/bin/python" -m pip install --quiet --disable-pip-version-check "$requirement"
}

# venv_tool_cli SCRIPT EXE COMMAND: the scripts' `install` (calls their `install` function) and
# `path` (prints EXE, the executable their callers run; exit 1 when it is missing).
venv_tool_cli() {
  local script="$1" exe="$2"
  case "${3:-}" in
    install) install ;;
    path)
      if [ -x "$exe" ]; then echo "$exe"; else
        echo "not installed: run $script install" >&2; exit 1
      fi
      ;;
    *) echo "usage: $script install|path" >&2; exit 2 ;;
  esac
}
