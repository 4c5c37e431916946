#!/usr/bin/env bash
# Makes sure redis-server is available for the test suite. Tests start their own private
# redis-server on a free loopback port, so only the binary is needed, not a running server.
# With SEQCTL_TEST_REDIS_URL set, the tests use that server and no binary is needed.
set -euo pipefail
if [ -n "${SEQCTL_TEST_REDIS_URL:-}" ] || command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is missing: installing it with apt-get (Debian package redis-server)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
redis-server is needed by the tests and was not found on PATH.
Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis),
or point the tests at a running Redis with SEQCTL_TEST_REDIS_URL=redis://127.0.0.1:6379/15
MSG
exit 1
