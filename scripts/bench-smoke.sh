#!/usr/bin/env bash
# Every bench binary once in its smoke mode (`--smoke`: a few runs of every part), so that a
# bench cannot rot unnoticed: a bench that fails or no longer runs to its end fails CI. Timings
# are printed, never asserted (debug builds on a shared machine). Run by `scripts/test.sh` after
# `cargo build --workspace --bins`; the binaries are in `$CARGO_TARGET_DIR/debug`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/debug"
# bench_page's anchor: Playwright (playwright-core from npm, pinned by the committed lock; it
# drives Debian's Chromium and downloads no browser).
if [ ! -f tests/bench/page/node_modules/playwright-core/package.json ]; then
  (cd tests/bench/page && npm ci --no-audit --no-fund --silent)
fi
# bench_console drives the console with the console test's packages (playwright-core, axe-core).
if [ ! -f tests/console/node_modules/playwright-core/package.json ]; then
  (cd tests/console && npm ci --no-audit --no-fund --silent)
fi
failed=()
# One smoke run: a bench binary and its arguments (`--smoke` is added).
smoke_run() {
  local label start
  label="$(basename "$1") ${*:2}"
  label="${label% }"
  echo "== $label --smoke"
  start=$(date +%s)
  if ! timeout 600 "$@" --smoke; then
    failed+=("$label")
  fi
  echo "== $label: $(( $(date +%s) - start )) s"
}
for b in "$bin"/bench_*; do
  name="$(basename "$b")"
  case "$name" in *.d|bench_seal) continue ;; esac
  [ -x "$b" ] || continue
  smoke_run "$b"
done
# A bench's second mode, where cheap: bench_scale's two replicas (4 guests).
if [ -x "$bin/bench_scale" ]; then
  smoke_run "$bin/bench_scale" --replicas 2
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "bench smoke runs failed: ${failed[*]}" >&2
  exit 1
fi
