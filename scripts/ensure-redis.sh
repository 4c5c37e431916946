#!/usr/bin/env bash
# Makes sure redis-server and redis-cli are available for the test suite. Tests start their
# own private redis-server on a free loopback port (and redis-cli joins the test cluster), so
# only the binaries are needed, not a running server.
# With SEQCTL_TEST_REDIS_URL set, the tests use that server and no binary is needed.
set -euo pipefail
if [ -n "${SEQCTL_TEST_REDIS_URL:-}" ] || { command -v redis-server && command -v redis-cli; } >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server or redis-cli is missing: installing them with apt-get (Debian packages redis-server, redis-tools)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
  { command -v redis-server && command -v redis-cli; } >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
redis-server and redis-cli are needed by the tests and were not both found on PATH.
Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis),
or point the tests at a running Redis with SEQCTL_TEST_REDIS_URL=redis://127.0.0.1:6379/15
MSG
exit 1
