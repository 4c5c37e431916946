#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers on 127.0.0.1:5432 with trust auth for the outbox
# tests: starts the installed cluster when it is stopped, installs PostgreSQL (Debian, as
# root) when it is missing. With SEQCTL_TEST_POSTGRES_URL set, nothing is done.
set -euo pipefail
[ -n "${SEQCTL_TEST_POSTGRES_URL:-}" ] && exit 0
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL is missing: installing it with apt-get (Debian package postgresql)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "The outbox tests need PostgreSQL: apt-get install postgresql, or set SEQCTL_TEST_POSTGRES_URL" >&2
    exit 1
  fi
fi
ver=$(ls /etc/postgresql | sort -V | tail -1)
hba=/etc/postgresql/$ver/main/pg_hba.conf
changed=
if ! grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
  sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  changed=1
fi
state=$(pg_lsclusters -h | awk -v v="$ver" '$1 == v && $2 == "main" { print $4 }')
if [ "$state" != online ]; then
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start
elif [ -n "$changed" ]; then
  pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
fi
for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
pg_isready -q -h 127.0.0.1 -p 5432 || { echo "PostgreSQL did not come up on 127.0.0.1:5432" >&2; exit 1; }
runuser -u postgres -- psql -Atqc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 || runuser -u postgres -- createdb test
