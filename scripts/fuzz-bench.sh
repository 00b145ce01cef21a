#!/usr/bin/env bash
# The longer fuzz run (docs/fuzzing.md#the-benchmark): every target, or those named, for SECS
# seconds each (default 600) from its committed seed corpus alone, one at a time at nice 10, and
# a table of what each reached: execs/s, coverage (libFuzzer's `cov`, edges; `ft`, features)
# and its ratio to the seed corpus's own coverage measured at the start of the same run (the
# anchor: what the seeds alone reach), corpus size, peak RSS. A crash fails it like the CI step.
#
#   scripts/fuzz-bench.sh [--secs SECS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=600
if [ "${1:-}" = "--secs" ]; then secs="$2"; shift 2; fi
bash scripts/cargo-fuzz.sh build >/dev/null
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || mapfile -t targets < <(bash scripts/cargo-fuzz.sh list)
logs="$(mktemp -d "${TMPDIR:-/tmp}/rakazo-fuzz-bench.XXXXXX")"
trap 'rm -rf "$logs"' EXIT
failed=()
rows=()
for t in "${targets[@]}"; do
  echo "== $t: $secs s" >&2
  if ! nice -n 10 bash scripts/cargo-fuzz.sh run "$t" "$secs" >"$logs/$t" 2>&1; then
    failed+=("$t")
    tail -n 40 "$logs/$t" >&2
  fi
  # `#N INITED cov: C ft: F ...` after the seeds; `#N DONE cov: C ft: F corp: U/Sb ...` at the end.
  rows+=("$(awk -v t="$t" '
    /INITED cov:/ { for (i = 1; i <= NF; i++) { if ($i == "cov:") c0 = $(i+1); if ($i == "ft:") f0 = $(i+1) } }
    /DONE +cov:/  { for (i = 1; i <= NF; i++) { if ($i == "cov:") c1 = $(i+1); if ($i == "ft:") f1 = $(i+1); if ($i == "corp:") corp = $(i+1) } }
    /stat::number_of_executed_units/ { execs = $2 }
    /stat::average_exec_per_sec/     { eps = $2 }
    /stat::peak_rss_mb/              { rss = $2 }
    END {
      printf "| %s | %s | %s | %s (%.2f×) | %s (%.2f×) | %s | %s |", t, execs, eps, c1, (c0 ? c1 / c0 : 0), f1, (f0 ? f1 / f0 : 0), corp, rss
    }' "$logs/$t")")
done
echo
echo "fuzzing, $secs s per target, $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| target | execs | execs/s | edges (× seeds) | features (× seeds) | corpus (units/bytes) | peak RSS MB |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
