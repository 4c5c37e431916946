#!/usr/bin/env bash
# Redis CPU per call of one fixed workload served by one redis-server, by three plain
# redis-servers, and by a 3-master Redis Cluster (each of the three takes a third), on
# the machine it runs on. It tells how much of a cluster's Redis CPU per event comes from
# the deployment itself (processes sharing the cores, cluster bookkeeping) rather than
# from what the engine sends. Workload: EVALSHA of a script doing GET + XACK on one
# partition's keys (the shape of a fenced acknowledgement), N calls in all, 6 client
# connections in all, pipeline 4. Ports 6401-6403 must be free; every server is private
# and shut down at the end. Needs redis-server, redis-cli, redis-benchmark and bc.
#
#   N=600000 ROUNDS=2 bash scripts/bench-redis-split.sh
set -euo pipefail
N=${N:-600000}
ROUNDS=${ROUNDS:-2}
PORTS=(6401 6402 6403)
DIR=$(mktemp -d)
SCRIPT="local v = redis.call('GET', KEYS[1]) redis.call('XACK', KEYS[2], 'g', '1-1') return v"
trap 'stopall; rm -rf "$DIR"' EXIT

start() { # port, cluster yes/no
  mkdir -p "$DIR/$1" && rm -f "$DIR/$1"/*
  local extra=()
  [ "$2" = yes ] && extra=(--cluster-enabled yes --cluster-config-file nodes.conf)
  redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR/$1" --daemonize yes "${extra[@]}" >/dev/null
}
stopall() { for p in "${PORTS[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done; sleep 0.3; }
cpu() { redis-cli -p "$1" info cpu | awk -F: '/used_cpu_(sys|user):/{s+=$2} END{printf "%.4f", s}'; }
calls() { redis-cli -p "$1" info commandstats | awk -F'[=,]' '/cmdstat_evalsha/{print $2}'; }

# tagfor port: a hash tag whose slot the node on port serves (any tag on a plain node).
tagfor() {
  if ! redis-cli -p "$1" cluster info 2>/dev/null | grep -q cluster_state; then echo "t$1"; return; fi
  local id; id=$(redis-cli -p "$1" cluster myid)
  for t in $(seq 1 5000); do
    local s; s=$(redis-cli -p "$1" cluster keyslot "c$t")
    if redis-cli -p "$1" cluster nodes | awk -v s="$s" -v id="$id" '$1 == id { for (i = 9; i <= NF; i++) { n = split($i, r, "-"); if (s >= r[1] && s <= (n == 2 ? r[2] : r[1])) f = 1 } } END { exit !f }'; then
      echo "c$t"; return
    fi
  done
}

measure() { # label, ports...
  local label=$1; shift
  local ports=("$@") n=$# before=() shas=() tags=()
  for p in "${ports[@]}"; do
    local t; t=$(tagfor "$p"); tags+=("$t")
    redis-cli -p "$p" set "lease{$t}" tok >/dev/null
    redis-cli -p "$p" xadd "s{$t}" 1-1 f v >/dev/null
    redis-cli -p "$p" xgroup create "s{$t}" g 0 >/dev/null
    shas+=("$(redis-cli -p "$p" script load "$SCRIPT")")
    redis-cli -p "$p" config resetstat >/dev/null
    before+=("$(cpu "$p")")
  done
  local i=0
  for p in "${ports[@]}"; do
    redis-benchmark -p "$p" -n $((N / n)) -c $((6 / n)) -P 4 -q EVALSHA "${shas[$i]}" 2 "lease{${tags[$i]}}" "s{${tags[$i]}}" >/dev/null &
    i=$((i + 1))
  done
  wait
  local total=0 used=0
  i=0
  for p in "${ports[@]}"; do
    used=$(echo "$used + $(cpu "$p") - ${before[$i]}" | bc -l)
    total=$((total + $(calls "$p")))
    i=$((i + 1))
  done
  printf "%-22s %8d calls  Redis CPU %.2f s  %.2f us/call\n" "$label" "$total" "$used" "$(echo "$used * 1000000 / $total" | bc -l)"
}

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round"
  stopall; start 6401 no; sleep 0.3
  measure "one redis-server" 6401
  stopall; for p in "${PORTS[@]}"; do start "$p" no; done; sleep 0.3
  measure "three redis-servers" "${PORTS[@]}"
  stopall; for p in "${PORTS[@]}"; do start "$p" yes; done; sleep 0.3
  redis-cli --cluster create 127.0.0.1:6401 127.0.0.1:6402 127.0.0.1:6403 --cluster-replicas 0 --cluster-yes >/dev/null
  sleep 2
  measure "3-master cluster" "${PORTS[@]}"
done
