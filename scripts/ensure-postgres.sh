#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers on 127.0.0.1:5432 with trust auth and a `test` database
# (the lease-store conformance suite and the PostgreSQL system test use it). Starts the cluster
# that Debian's package installs if it is not running.
set -euo pipefail
url_ok() { psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; }
if ! url_ok; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -n | tail -1)
  if [ -n "$ver" ]; then
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    # Tests connect as postgres over TCP on loopback without a password.
    grep -q "^host all all 127.0.0.1/32 trust" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || pg_ctlcluster --skip-systemctl-redirect "$ver" main restart
  fi
  for _ in $(seq 1 50); do url_ok && break; sleep 0.2; done
  url_ok || { echo "PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
fi
psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname='test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -d postgres -c 'create database test' >/dev/null
