#!/usr/bin/env bash
# Times the operator commands at scale: for each N, a private redis-server is filled with
# N partitions (one event each, published with `seqctl publish --data @file`, no engine
# running), then `partitions list` (the whole list as JSON in a pipe, its first row, the
# state filter with and without a built state index, a key glob), the dashboard's first
# snapshot and one refresh of the backlog exporter are timed with their peak RSS.
# docs/benchmarks.md ("Operator commands at scale") shows the output.
#
#   scripts/bench-operator-scale.sh [N ...]            default: 20000 200000 1000000
#
# SEQCTL=path/to/seqctl times that binary (default: one built from this tree), PORT the
# port of the private redis-server (default 6391). A million partitions take about
# 4.5 GB in Redis. The dashboard and exporter rows run benchmarks of this tree
# (BenchmarkSnapshotAtScale, BenchmarkRefreshAtScale) whatever SEQCTL is.
set -euo pipefail
cd "$(dirname "$0")/.."
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(20000 200000 1000000)
port=${PORT:-6391}
work=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
seqctl=${SEQCTL:-}
if [ -z "$seqctl" ]; then
  seqctl=$work/seqctl
  go build -o "$seqctl" ./cmd/seqctl
fi
cp scripts/scale-domain.toml "$work/domain.toml"
export SEQCTL_REDIS_URL=redis://127.0.0.1:$port/0
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --logfile "$work/redis.log" --dir "$work" >/dev/null
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done

# measure LABEL CMD...: wall seconds and peak RSS of one command, stdout discarded.
measure() {
  local label=$1 secs kb
  shift
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>"$work/err" || {
    echo "$label: failed: $(tail -n 3 "$work/err")" >&2
    return 0
  }
  read -r secs kb <"$work/time"
  printf '| %s | %s | %.1f s | %d MB |\n' "$n" "$label" "$secs" $((kb / 1024))
}

# first_row LABEL CMD...: seconds until the first line of stdout.
first_row() {
  local label=$1 start end
  shift
  start=$(date +%s.%N)
  { "$@" 2>/dev/null || true; } | head -n 1 >/dev/null
  end=$(date +%s.%N)
  printf '| %s | %s | %.2f s | |\n' "$n" "$label" "$(echo "$end - $start" | bc)"
}

# bench LABEL PACKAGE NAME UNIT: one run of a benchmark at scale (go test -bench): its
# time (the metric UNIT) and the peak RSS of the test process.
bench() {
  local out
  out=$(SEQCTL_SCALE_REDIS_URL=$SEQCTL_REDIS_URL go test "$2" -run '^$' -bench "$3" -benchtime 1x -count 1 2>&1) || {
    echo "$1: failed: $out" >&2
    return 0
  }
  printf '| %s | %s | %.2f s | %.0f MB |\n' "$n" "$1" \
    "$(echo "$out" | awk -v u="$4" '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == u) print $(i - 1) }')" \
    "$(echo "$out" | awk '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == "MB-peak-rss") print $(i - 1) }')"
}

cfg=(--config "$work/domain.toml")
echo "| partitions | measurement | time | peak RSS |"
echo "|---|---|---|---|"
for n in "${ns[@]}"; do
  redis-cli -p "$port" flushall >/dev/null
  awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "{\"client_id\":\"k%d\"}\n", i }' >"$work/events.jsonl"
  "$seqctl" "${cfg[@]}" publish --event OrderPlaced --data @"$work/events.jsonl" -o json >/dev/null 2>&1
  measure "partitions list -o json, whole list in a pipe" "$seqctl" "${cfg[@]}" partitions list -o json
  first_row "partitions list -o json, first row" "$seqctl" "${cfg[@]}" partitions list -o json
  measure "partitions list --state halted, index not built (none halted)" "$seqctl" "${cfg[@]}" partitions list --state halted
  redis-cli -p "$port" set order:__stateindex__ 1 >/dev/null # as --rebuild-index leaves it
  measure "partitions list --state halted, index built (none halted)" "$seqctl" "${cfg[@]}" partitions list --state halted
  measure "partitions list --key 'k12345*'" "$seqctl" "${cfg[@]}" partitions list --key 'k12345*'
  bench "top: first snapshot" ./cmd/seqctl/internal/top SnapshotAtScale s/snapshot
  bench "exporter: one refresh" ./pkg/metrics RefreshAtScale s/refresh
done
