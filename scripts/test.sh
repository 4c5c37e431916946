#!/usr/bin/env bash
# The body of `make test`: the main suite with the race detector and, beside it, the
# deploy module's offline tests (chart, dashboard, alerts, image). The deploy tests spend
# most of their time compiling Helm and the Kubernetes API types, while the main suite
# spends most of its waiting on Redis and on timers, so they run at once; the deploy
# module's output is printed after the main suite's, and the exit status is non-zero when
# either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PKGS=${PKGS:-./...}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(cd deploy && "$GO" test -count=1 -timeout 15m ./...) >"$log" 2>&1 &
deploy=$!
"$GO" test -race -count=1 -timeout 30m $PKGS
main=$?
wait "$deploy"
deployed=$?
echo "--- the deploy module (deploy/go.mod), run beside the main suite:"
cat "$log"
if [ "$main" -ne 0 ] || [ "$deployed" -ne 0 ]; then
  echo "make test: main suite exit $main, deploy module exit $deployed" >&2
  exit 1
fi
