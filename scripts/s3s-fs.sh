#!/usr/bin/env bash
# s3s-fs, the S3-compatible server the homes object-store tests run against (a real S3 API over a
# directory, SigV4 checked, path-style). Version 0.14.1: 0.15+ needs a newer rustc.
#
#   scripts/s3s-fs.sh install          build it into the cache dir if it is not there yet (~3-4 min)
#   scripts/s3s-fs.sh path             print the binary's path; exit 1 if it is not installed
#   scripts/s3s-fs.sh run PORT DIR     install if missing, then serve DIR on 127.0.0.1:PORT
#                                      with access key and secret "test"/"test" (foreground)
#
# The cache dir is $RAKAZO_TOOLS_DIR, else $XDG_CACHE_HOME/rakazo/tools, else
# ~/.cache/rakazo/tools; it lives outside the checkout so CI reuses it between runs on one machine.
# $RAKAZO_S3S_FS, if set, names a binary to use instead (and `install` does nothing).
set -euo pipefail

VERSION=0.14.1
TOOLS_DIR="${RAKAZO_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rakazo/tools}"
ROOT="$TOOLS_DIR/s3s-fs-$VERSION"
BIN="${RAKAZO_S3S_FS:-$ROOT/bin/s3s-fs}"

install() {
  if [ -x "$BIN" ]; then return 0; fi
  if [ -n "${RAKAZO_S3S_FS:-}" ]; then
    echo "RAKAZO_S3S_FS=$RAKAZO_S3S_FS is not an executable file" >&2
    exit 1
  fi
  mkdir -p "$ROOT"
  echo "installing s3s-fs $VERSION into $ROOT (takes a few minutes)" >&2
  # A private target dir: the workspace's CARGO_TARGET_DIR would mix this build with the project's
  # and hold its lock for minutes.
  CARGO_TARGET_DIR="$ROOT/build" cargo install s3s-fs --version "$VERSION" --features binary \
    --locked --root "$ROOT" --quiet
  rm -rf "$ROOT/build"
}

case "${1:-}" in
  install)
    install
    ;;
  path)
    if [ -x "$BIN" ]; then echo "$BIN"; else
      echo "s3s-fs is not installed at $BIN: run 'bash scripts/s3s-fs.sh install'" >&2
      exit 1
    fi
    ;;
  run)
    [ $# -eq 3 ] || { echo "usage: $0 run PORT DIR" >&2; exit 2; }
    install
    mkdir -p "$3"
    exec "$BIN" --host 127.0.0.1 --port "$2" --access-key test --secret-key test "$3"
    ;;
  *)
    echo "usage: $0 install | path | run PORT DIR" >&2
    exit 2
    ;;
esac
