#!/usr/bin/env bash
# cargo-fuzz and the fuzz targets of fuzz/ (docs/fuzzing.md). Version 0.13.2, run on the STABLE
# toolchain with `--sanitizer none`: no nightly is needed. libFuzzer's coverage instrumentation
# (`-Cpasses=sancov-module`, stable codegen flags) is all a Rust parser needs to be fuzzed for
# panics, hangs and memory blow-ups; the sanitizers (address, memory, thread) are the only part
# that needs nightly (`-Zsanitizer`), and safe Rust gains little from them. To fuzz with
# AddressSanitizer anyway: `cargo +nightly fuzz run TARGET` (nightly required).
#
#   scripts/cargo-fuzz.sh install           build cargo-fuzz into the cache dir if it is not there
#   scripts/cargo-fuzz.sh path              print its binary's path; exit 1 if not installed
#   scripts/cargo-fuzz.sh list              the fuzz targets
#   scripts/cargo-fuzz.sh build             build every target (optimised, debug assertions on)
#   scripts/cargo-fuzz.sh run TARGET SECS [LIBFUZZER ARGS...]
#                                           fuzz TARGET for SECS seconds from its seed corpus
#                                           (fuzz/corpus/TARGET); new inputs go to a scratch
#                                           corpus, never into the committed one
#   scripts/cargo-fuzz.sh ci [SECS]         build, then run every target SECS seconds (default
#                                           $RAKAZO_FUZZ_SECONDS, else 15): what scripts/test.sh
#                                           runs. A crash, a hang (an input over 10 s) or memory
#                                           over 1 GiB fails it, and the failing input is kept
#                                           under fuzz/artifacts/TARGET/.
#
# The cache dir is $RAKAZO_TOOLS_DIR, else $XDG_CACHE_HOME/rakazo/tools, else
# ~/.cache/rakazo/tools. The targets build into $RAKAZO_FUZZ_TARGET_DIR, else
# $CARGO_TARGET_DIR/fuzz, else target/fuzz: apart from the workspace's own builds, whose flags
# differ.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.13.2
TOOLS_DIR="${RAKAZO_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rakazo/tools}"
ROOT="$TOOLS_DIR/cargo-fuzz-$VERSION"
BIN="$ROOT/bin/cargo-fuzz"
TARGET_DIR="${RAKAZO_FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/fuzz}"
# Coverage instrumentation without a sanitizer: works on stable (see the head of this file).
BUILD_ARGS=(--sanitizer none --target-dir "$TARGET_DIR")

install() {
  if [ -x "$BIN" ]; then return 0; fi
  mkdir -p "$ROOT"
  echo "installing cargo-fuzz $VERSION into $ROOT (takes a minute or two)" >&2
  CARGO_TARGET_DIR="$ROOT/build" cargo install cargo-fuzz --version "$VERSION" --locked \
    --root "$ROOT" --quiet
  rm -rf "$ROOT/build"
}

fuzz() {
  install
  PATH="$ROOT/bin:$PATH" cargo fuzz "$@"
}

targets() {
  fuzz list
}

build() {
  fuzz build "${BUILD_ARGS[@]}"
}

# run TARGET SECS [LIBFUZZER ARGS...]
run() {
  local target="$1" secs="$2"
  shift 2
  [ -d "fuzz/corpus/$target" ] || { echo "no seed corpus fuzz/corpus/$target" >&2; exit 2; }
  # A scratch corpus, and $TMPDIR of the target (the archive target restores archives there):
  # in memory where /dev/shm is, the disk's syncs are not what is fuzzed.
  local base="${TMPDIR:-/tmp}" scratch
  if [ -w /dev/shm ]; then base=/dev/shm; fi
  scratch="$(mktemp -d "$base/rakazo-fuzz-$target.XXXXXX")"
  mkdir "$scratch/corpus" "$scratch/tmp"
  local status=0
  TMPDIR="$scratch/tmp" fuzz run "${BUILD_ARGS[@]}" "$target" "$scratch/corpus" \
    "fuzz/corpus/$target" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 "$@" \
    || status=$?
  rm -rf "$scratch"
  return "$status"
}

ci() {
  local secs="${1:-${RAKAZO_FUZZ_SECONDS:-15}}" start failed=()
  start=$(date +%s)
  # The fuzz crate is its own workspace: `cargo fmt --all` at the root does not see it.
  cargo fmt --manifest-path fuzz/Cargo.toml -- --check
  # cargo-fuzz has no --locked: check the committed lock file first.
  cargo metadata --manifest-path fuzz/Cargo.toml --locked --format-version 1 >/dev/null
  build
  echo "== fuzz targets built in $(( $(date +%s) - start )) s"
  local log
  log="$(mktemp "${TMPDIR:-/tmp}/rakazo-fuzz-log.XXXXXX")"
  for t in $(targets); do
    echo "== fuzz $t for $secs s"
    if run "$t" "$secs" >"$log" 2>&1; then
      grep -E '(INITED|DONE) ' "$log" || true
    else
      failed+=("$t")
      # The panic and its input (libFuzzer's own log before it is long and says little).
      grep -E -A4 "panicked at|ERROR: libFuzzer|SUMMARY" "$log" || true
      tail -n 25 "$log"
    fi
  done
  rm -f "$log"
  echo "== fuzzing took $(( $(date +%s) - start )) s"
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz targets failed: ${failed[*]} (inputs under fuzz/artifacts/; docs/fuzzing.md)" >&2
    exit 1
  fi
}

case "${1:-}" in
  install) install ;;
  path)
    if [ -x "$BIN" ]; then echo "$BIN"; else
      echo "cargo-fuzz is not installed at $BIN: run 'bash scripts/cargo-fuzz.sh install'" >&2
      exit 1
    fi
    ;;
  list) targets ;;
  build) build ;;
  run)
    [ $# -ge 3 ] || { echo "usage: $0 run TARGET SECS [LIBFUZZER ARGS...]" >&2; exit 2; }
    shift
    run "$@"
    ;;
  ci)
    shift
    ci "$@"
    ;;
  *)
    echo "usage: $0 install | path | list | build | run TARGET SECS [ARGS...] | ci [SECS]" >&2
    exit 2
    ;;
esac
