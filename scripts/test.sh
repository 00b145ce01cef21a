#!/usr/bin/env bash
# The whole test suite: formatting, lints, the static guest, and every test against real
# processes, real QUIC on loopback, real SQLite and PostgreSQL. `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
bash scripts/ensure-postgres.sh
# The homes object-store tests run against a real S3 server (s3s-fs), cached outside the checkout.
bash scripts/s3s-fs.sh install
# schemathesis checks the live server against control-plane/openapi.json (tests/system/openapi.rs);
# installed into a venv cached outside the checkout.
bash scripts/schemathesis.sh install
# vncdotool, the third-party RFB client tests/system/rfb_client.rs drives capability URLs with;
# installed into a venv cached outside the checkout.
bash scripts/vncdotool.sh install
# Docker computers run on a real engine (podman's Docker-compatible API) from our own image; the
# image's root filesystem is built from Debian packages once and cached outside the checkout
# (keyed by a hash of its recipe). The tests layer the guest on it through `rakazo image build`.
bash scripts/podman.sh install
bash scripts/podman.sh start >/dev/null
# Every guest build layers a new rakazo-computer:<hash> image; keep the three newest.
podman --remote --url "unix://$(bash scripts/podman.sh sock)" images --sort created \
  --filter reference=rakazo-computer --format '{{.Repository}}:{{.Tag}}' | tail -n +4 \
  | xargs -r podman --remote --url "unix://$(bash scripts/podman.sh sock)" rmi >/dev/null 2>&1 || true
bash image/rootfs.sh build >/dev/null

# SysV shared-memory segments on the machine before the suite: the suite must leave none behind
# (x11vnc, which served live views before Xvnc, leaked some on every run until `kernel.shmmni`
# ran out). Checked at the end.
shm_segments() { tail -n +2 /proc/sysvipc/shm | wc -l; }
shm_before="$(shm_segments)"

echo "== fmt"; cargo fmt --all -- --check
echo "== clippy"; cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== no import circles between modules"; python3 scripts/module-cycles.py
echo "== gateway-proto has no tokio"
if cargo tree -p gateway-proto -e normal --prefix none | grep -qE '^(tokio|quinn|hyper) '; then
  echo "gateway-proto must not depend on an async runtime or sockets" >&2; exit 1
fi
echo "== build"
cargo build --workspace --bins --locked
cargo build --target x86_64-unknown-linux-musl -p guest-agent --bin rakazo-guest --locked
echo "== every bench, smoke mode (timings printed, never asserted)"
bash scripts/bench-smoke.sh
echo "== fuzz targets, a bounded run each (docs/fuzzing.md; a crash fails)"
bash scripts/cargo-fuzz.sh ci
echo "== test"
cargo test --workspace --locked
echo "== tunnel over TCP (guests told a UDP address that never answers)"; RAKAZO_TEST_TUNNEL=tcp cargo test -p tests --test system --locked -- foundation:: desktops:: live:: homes:: page_browser:: tunnel_tcp::
echo "== no SysV shared-memory segment left behind"
shm_after="$(shm_segments)"
if [ "$shm_after" -gt "$shm_before" ]; then
  echo "the suite left $((shm_after - shm_before)) SysV shared-memory segments ($shm_before before, $shm_after after):" >&2
  ipcs -m -p >&2 || true
  exit 1
fi
echo "$shm_after segments, $shm_before before the suite"
