#!/usr/bin/env bash
# Times `seqctl run` at scale: for each N, a fresh private redis-server gets N events, one
# per key (k0000001 ...), so N live partitions, published with `seqctl publish --data
# @file` while no engine runs. Then two `seqctl run` instances start at the same moment,
# with the default timing, and drain them into a no-op HTTP endpoint (scripts/noophttp:
# 204 to every POST, it records the first and the last request). Per N it reports:
#
#   - the publish rate and Redis used_memory / N after the publish and after the drain;
#   - seconds from the start of the instances to the first event handled;
#   - the drain rate, N / (last request - first request), and N / (last request - start);
#   - Redis calls per fresh key: CONFIG RESETSTAT right before the start, INFO
#     commandstats once the endpoint has seen N requests (calls inside scripts included;
#     the script's own INFO and CONFIG RESETSTAT left out), total / N and the top TOP
#     (default 8) with each one's Redis time per key; and Redis CPU per fresh key, the
#     change of used_cpu_sys + used_cpu_user (INFO cpu) over the drain, / N;
#   - "discovery pass failed" lines in the instances' logs, and the other warnings;
#   - VmRSS of each instance once it has been idle for IDLE seconds, and
#     (RSS - base) / (N/2), the RSS per idle owned partition, where base is the RSS of one
#     `seqctl run` with the same config on an empty Redis after IDLE seconds.
#
# The strict rate is measured once, before the N loop: the peer harness's `seqctl`
# workload (PEERS/README.md: 200,000 events on 64 keys, two engines, no-op handler), built
# with -tags seqctl from a copy pointed at this tree; if it cannot be built or run, the
# engine's own BenchmarkThroughput/noop (same shape). Both compile the engine sources of
# this tree, whatever SEQCTL is. The ratio column is drain ev/s (first to last request)
# over that strict rate.
#
#   scripts/bench-engine-scale.sh [N ...]            default: 20000 200000 1000000
#
# SEQCTL=path/to/seqctl times that binary (default: one built from this tree), PORT the
# port of the private redis-server (default 6392), LIMIT the seconds a drain may take
# (default 300; a drain stopped there reports what was handled), IDLE the idle wait
# before RSS is read (default 10), REDIS_ARGS more arguments for redis-server (e.g.
# "--stream-node-max-bytes 1024"), PEERS the peer harness (default ../shared/bench/peers
# next to this checkout). A million partitions take about 4.5 GB in Redis. Needs
# redis-server, redis-cli, go, curl, jq and awk. The table goes to stdout, progress to
# stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(20000 200000 1000000)
port=${PORT:-6392}
limit=${LIMIT:-300}
idle=${IDLE:-10}
top=${TOP:-8}
peers=${PEERS:-$root/../shared/bench/peers}
for n in "${ns[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ && $n -ge 2 ]] || { echo "bench-engine-scale: N must be an integer of at least 2, got '$n'" >&2; exit 2; }
done
[[ $limit =~ ^[1-9][0-9]*$ ]] || { echo "bench-engine-scale: LIMIT must be a positive number of seconds, got '$limit'" >&2; exit 2; }
[[ $idle =~ ^[0-9]+$ ]] || { echo "bench-engine-scale: IDLE must be a number of seconds, got '$idle'" >&2; exit 2; }
for tool in redis-server redis-cli go curl jq awk; do
  command -v "$tool" >/dev/null || { echo "bench-engine-scale: $tool is not installed" >&2; exit 1; }
done

work=$(mktemp -d)
inst=()    # pids of the running seqctl instances
noop_pid=  # pid of the running no-op server
redis_up=
notes=$work/notes # printed below the table

log() { echo "$(date +%T) $*" >&2; }
fail() {
  echo "bench-engine-scale: $*" >&2
  exit 1
}

# stop_instances: SIGTERM to every instance, SIGKILL to those still running 30 s later.
stop_instances() {
  local p rc deadline
  [ ${#inst[@]} -gt 0 ] || return 0
  for p in "${inst[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  deadline=$((SECONDS + 30))
  for p in "${inst[@]}"; do
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if kill -0 "$p" 2>/dev/null; then
      echo "bench-engine-scale: seqctl run (pid $p) still running 30 s after SIGTERM: killed" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
    rc=0
    wait "$p" 2>/dev/null || rc=$?
    [ $rc -eq 0 ] || echo "- seqctl run (pid $p) exited with status $rc after SIGTERM" >>"$notes"
  done
  inst=()
}

stop_noop() {
  [ -n "$noop_pid" ] || return 0
  kill -TERM "$noop_pid" 2>/dev/null || true
  wait "$noop_pid" 2>/dev/null || true
  noop_pid=
}

stop_redis() {
  [ -n "$redis_up" ] || return 0
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  local i
  for i in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 || break
    sleep 0.1
  done
  redis_up=
}

cleanup() {
  stop_instances
  stop_noop
  stop_redis
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_redis: a fresh private redis-server on $port, without persistence.
start_redis() {
  if redis-cli -p "$port" ping >/dev/null 2>&1; then
    fail "something already answers on port $port; set PORT to a free one"
  fi
  # shellcheck disable=SC2086 # REDIS_ARGS is a list of arguments
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --logfile "$work/redis.log" --dir "$work" ${REDIS_ARGS:-} >/dev/null || fail "redis-server did not start: $(tail -n 3 "$work/redis.log" 2>/dev/null)"
  redis_up=1
  local i
  for i in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "redis-server on port $port does not answer after 10 s: $(tail -n 3 "$work/redis.log" 2>/dev/null)"
}

used_memory() { redis-cli -p "$port" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }
rss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }

# redis_cpu: seconds of CPU the private redis-server has used (user + system).
redis_cpu() { redis-cli -p "$port" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'; }

# start_noop: a fresh no-op HTTP server; sets noop_addr.
start_noop() {
  "$work/noophttp" >"$work/noop.out" 2>"$work/noop.err" &
  noop_pid=$!
  local i
  noop_addr=
  for i in $(seq 100); do
    noop_addr=$(head -n 1 "$work/noop.out")
    [ -z "$noop_addr" ] || break
    kill -0 "$noop_pid" 2>/dev/null || fail "the no-op HTTP server exited: $(tail -n 3 "$work/noop.err")"
    sleep 0.1
  done
  [ -n "$noop_addr" ] || fail "the no-op HTTP server did not report its address within 10 s"
}

noop_stats() { curl -sf --max-time 5 "http://$noop_addr/stats" || fail "the no-op HTTP server at $noop_addr does not answer GET /stats"; }

# write_config: domain.toml delivering OrderProjector's events to the no-op server.
write_config() {
  {
    cat scripts/scale-domain.toml
    printf '[handlers.deliver]\nhttp = "http://%s/"\n' "$noop_addr"
  } >"$work/domain.toml"
}

# start_instance NAME: one `seqctl run` in the background, its stderr in $work/NAME.err.
start_instance() {
  "$seqctl" "${cfg[@]}" run --instance-id "$1" >/dev/null 2>"$work/$1.err" &
  inst+=($!)
}

# check_instances: fails when an instance has exited.
check_instances() {
  local i
  for i in "${!inst[@]}"; do
    kill -0 "${inst[$i]}" 2>/dev/null ||
      fail "seqctl run (${names[$i]}) exited early: $(tail -n 5 "$work/${names[$i]}.err")"
  done
}

# strict_rate: sets strict (ev/s, empty if none could be measured) and strict_src.
strict_rate() {
  strict= strict_src= strict_rows=
  local b=$work/peers
  if [ ! -f "$peers/go.mod" ]; then
    log "strict rate: no peer harness at $peers"
  elif ! (cp -r "$peers/." "$b" && chmod -R u+w "$b" && cd "$b" &&
    go mod edit -require github.com/seqctl/seqctl@v0.0.0 -replace "github.com/seqctl/seqctl=$root" &&
    go mod tidy && go build -tags seqctl -o peerbench ./cmd/peerbench) >"$work/peers-build.log" 2>&1; then
    log "strict rate: the peer harness does not build against $root: $(tail -n 3 "$work/peers-build.log")"
  else
    log "strict rate: peer harness, workload seqctl (200000 events, 64 keys, 2 engines)"
    if (cd "$b" && ./peerbench -workloads seqctl -out "$work/peers.json") >"$work/peers.out" 2>"$work/peers.err"; then
      strict=$(jq -r '[.. | objects | select(.workload? == "seqctl") | .throughput_eps // empty] | first // empty' "$work/peers.json")
      local err
      err=$(jq -r '[.. | objects | select(.workload? == "seqctl") | .error // empty] | first // empty' "$work/peers.json")
      [ -z "$err" ] || echo "- peer harness, seqctl workload: $err" >>"$notes"
      strict_src="peer harness workload seqctl (200000 events, 64 keys, 2 engines, built against this tree)"
      strict_rows=$(grep -E '^(workload|seqctl) ' "$work/peers.out" || true)
    else
      log "strict rate: the peer harness failed: $(tail -n 3 "$work/peers.err")"
    fi
  fi
  if [ -z "$strict" ]; then
    log "strict rate: go test -bench BenchmarkThroughput/noop ./pkg/engine/ instead"
    if go test -run '^$' -bench 'BenchmarkThroughput/noop$' -benchtime 1x -count 1 ./pkg/engine/ >"$work/bench.out" 2>&1; then
      strict=$(awk '/^BenchmarkThroughput/ { for (i = 2; i <= NF; i++) if ($i == "ev/s") print $(i - 1) }' "$work/bench.out" | head -n 1)
      strict_src="BenchmarkThroughput/noop of ./pkg/engine (200000 events, 64 keys, 2 engines)"
      strict_rows=$(grep '^BenchmarkThroughput' "$work/bench.out" || true)
    else
      log "strict rate: the benchmark failed: $(tail -n 3 "$work/bench.out")"
    fi
  fi
  if [ -z "$strict" ]; then
    echo "- strict rate: not measured (see the messages above); the ratio column is n/a" >>"$notes"
  else
    printf -- '- strict rate, measured before the N loop: %.0f ev/s, %s\n' "$strict" "$strict_src" >>"$notes"
    [ -z "$strict_rows" ] || echo "$strict_rows" | sed 's/^/    /' >>"$notes"
  fi
}

# div A B FORMAT: A / B with awk, "n/a" if B is 0 or empty.
div() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { if (b + 0 == 0 || a == "") print "n/a"; else printf f, a / b }'; }

: >"$notes"
seqctl=${SEQCTL:-}
if [ -z "$seqctl" ]; then
  seqctl=$work/seqctl
  log "building seqctl from this tree"
  go build -o "$seqctl" ./cmd/seqctl || fail "go build ./cmd/seqctl failed"
fi
[ -x "$seqctl" ] || fail "SEQCTL=$seqctl is not an executable"
! redis-cli -p "$port" ping >/dev/null 2>&1 || fail "something already answers on port $port; set PORT to a free one"
go build -o "$work/noophttp" ./scripts/noophttp || fail "go build ./scripts/noophttp failed"
cfg=(--config "$work/domain.toml")
export SEQCTL_REDIS_URL=redis://127.0.0.1:$port/0

strict_rate

# The base: one instance on an empty Redis, idle for IDLE seconds.
log "base: one seqctl run on an empty Redis, RSS after ${idle} s"
start_redis
start_noop
write_config
names=(base)
start_instance base
sleep "$idle"
check_instances
base_kb=$(rss_kb "${inst[0]}")
stop_instances
stop_noop
stop_redis
echo "- base: one seqctl run on an empty Redis with the same config, after $idle s idle: VmRSS $(div "$base_kb" 1024 %.1f) MiB" >>"$notes"

echo "| live partitions | publish ev/s | Redis bytes/partition published | Redis bytes/partition drained | first event handled (s) | drain ev/s (first to last; from start) | ratio to strict | Redis calls per fresh key | discovery passes failed | RSS per instance (MiB) | RSS per idle owned partition (bytes) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for n in "${ns[@]}"; do
  t_n=$SECONDS
  log "N=$n: fresh redis-server, writing $n events"
  start_redis
  empty_mem=$(used_memory)
  start_noop
  write_config
  awk -v n="$n" 'BEGIN { for (i = 1; i <= n; i++) printf "{\"client_id\":\"k%07d\"}\n", i }' >"$work/events.jsonl"

  log "N=$n: publishing"
  p0=$(date +%s%N)
  "$seqctl" "${cfg[@]}" publish --event OrderPlaced --data @"$work/events.jsonl" -o json >"$work/publish.json" 2>"$work/publish.err" ||
    fail "N=$n: seqctl publish failed: $(tail -n 3 "$work/publish.err")"
  p1=$(date +%s%N)
  published=$(jq -r .published "$work/publish.json")
  [ "$published" = "$n" ] || fail "N=$n: seqctl publish published $published of $n events: $(tail -n 3 "$work/publish.err")"
  pub_rate=$(div "$n" "$((p1 - p0))e-9" %.0f)
  pub_mem=$(used_memory)

  log "N=$n: starting two instances, draining (limit ${limit} s)"
  redis-cli -p "$port" config resetstat >/dev/null
  cpu0=$(redis_cpu)
  names=("scale-$n-a" "scale-$n-b")
  t_start=$SECONDS
  start=$(date +%s%N)
  start_instance "${names[0]}"
  start_instance "${names[1]}"
  stopped=
  while :; do
    stats=$(noop_stats)
    read -r count first last <<<"$(jq -r '"\(.count) \(.first_ns) \(.last_ns)"' <<<"$stats")"
    [ "$count" -lt "$n" ] || break
    if [ $(($(date +%s%N) - start)) -ge $((limit * 1000000000)) ]; then
      stopped=1
      break
    fi
    check_instances
    sleep 0.2
  done
  t_drained=$SECONDS
  redis-cli -p "$port" info commandstats | tr -d '\r' >"$work/commandstats"
  cpu1=$(redis_cpu)
  log "N=$n: $count handled$([ -z "$stopped" ] || echo " (stopped at the ${limit} s limit)"); idle for ${idle} s"

  sleep "$idle"
  check_instances
  rss_a=$(rss_kb "${inst[0]}")
  rss_b=$(rss_kb "${inst[1]}")
  drained_mem=$(used_memory)
  stop_instances
  after=$(noop_stats | jq -r .count)
  stop_noop
  stop_redis

  # Rates over what was handled by the drain's end (N unless stopped at the limit).
  handled=$n
  mark=
  if [ -n "$stopped" ]; then
    handled=$count
    mark="*"
    echo "- N=$n: stopped at the ${limit} s limit with $count of $n events handled ($after by the instances' stop); the rates marked * are over those $count, the Redis calls per fresh key over all $n" >>"$notes"
  elif [ "$after" -gt "$count" ]; then
    echo "- N=$n: $((after - count)) requests came after the N-th (redeliveries), by the instances' stop" >>"$notes"
  fi
  first_s=$(div "$((first - start))" 1e9 %.2f)
  [ "$first" -gt 0 ] || first_s="none"
  drain=$(div "$handled" "$((last - first))e-9" %.0f)
  drain_start=$(div "$handled" "$((last - start))e-9" %.0f)
  ratio=$(div "$drain" "$strict" %.2f)
  [ "$drain" != n/a ] || ratio=n/a
  calls=$(awk -F'[:=,]' '/^cmdstat_/ { c = substr($1, 9); if (c != "info" && c != "config|resetstat") s += $3 } END { print s + 0 }' "$work/commandstats")
  disc=$(cat "$work/${names[0]}.err" "$work/${names[1]}.err" | grep -c 'discovery pass failed' || true)
  rss_mean=$(((rss_a + rss_b) / 2))
  printf '| %s | %s | %s | %s | %s | %s%s; %s%s | %s | %s | %s | %s / %s | %s |\n' \
    "$n" "$pub_rate" "$(div "$pub_mem" "$n" %.0f)" "$(div "$drained_mem" "$n" %.0f)" "$first_s" \
    "$drain" "$mark" "$drain_start" "$mark" "$ratio" "$(div "$calls" "$n" %.2f)" "$disc" \
    "$(div "$rss_a" 1024 %.1f)" "$(div "$rss_b" 1024 %.1f)" "$(div "$(((rss_mean - base_kb) * 1024))" "$((n / 2))" %.0f)"

  {
    printf -- '- N=%s: %s s in all (publish %.1f s, drain %s s, idle wait %s s, stop and clean-up %s s); Redis used_memory empty %s bytes, after the publish %s, after the drain %s\n' \
      "$n" "$((SECONDS - t_n))" "$(div "$((p1 - p0))" 1e9 %.2f)" "$((t_drained - t_start))" "$idle" "$((SECONDS - t_drained - idle))" \
      "$empty_mem" "$pub_mem" "$drained_mem"
    echo "  Redis CPU per fresh key over the drain (INFO cpu): $(awk -v a="$cpu0" -v b="$cpu1" -v n="$count" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }') µs"
    echo "  Redis calls per fresh key, N=$n, top $top of $calls calls (calls inside scripts included; failed calls in brackets; µs of Redis time per key):"
    awk -F'[:=,]' -v n="$n" -v total="$calls" '/^cmdstat_/ {
        c = substr($1, 9); if (c == "info" || c == "config|resetstat") next
        f = ""; for (i = 2; i < NF; i += 2) if ($i == "failed_calls" && $(i + 1) > 0) f = sprintf(" [%d failed]", $(i + 1))
        us = 0; for (i = 2; i < NF; i += 2) if ($i == "usec") us = $(i + 1)
        printf "%d\t    %-22s %8.3f per key  %5.1f%%  %7.1f µs/key%s\n", $3, c, $3 / n, 100 * $3 / total, us / n, f
      }' "$work/commandstats" | sort -t "$(printf '\t')" -k1,1nr >"$work/breakdown"
    head -n "$top" "$work/breakdown" | cut -f 2-
    awk -F'\t' -v n="$n" -v top="$top" 'NR > top { s += $1; k++ } END { if (k) printf "    the other %d commands     %8.3f per key\n", k, s / n }' "$work/breakdown"
    other=$(cat "$work/${names[0]}.err" "$work/${names[1]}.err" |
      grep -E 'level=(WARN|ERROR)' | grep -v 'discovery pass failed' |
      sed -E 's/.*level=([A-Z]+) msg=("([^"\\]|\\.)*"|[^ ]*).*/\1 \2/' | sort | uniq -c | sort -rn || true)
    if [ "$disc" -gt 0 ]; then
      echo "  \"discovery pass failed\": $disc lines; the first: $(grep -h -m 1 'discovery pass failed' "$work/${names[0]}.err" "$work/${names[1]}.err" | head -n 1 | sed -E 's/.*msg="discovery pass failed" //' | cut -c 1-300)"
    fi
    if [ -n "$other" ]; then
      echo "  other warnings and errors in the instances' logs (count, level, message):"
      echo "$other" | sed 's/^/    /'
    fi
  } >>"$notes"
done

echo
echo "first event handled: seconds from the start of the two instances to the first request at"
echo "the no-op endpoint. RSS per idle owned partition: (mean instance VmRSS - base) / (N/2), the"
echo "base being one instance on an empty Redis; the RSS column includes that fixed base."
echo "Redis bytes/partition: used_memory / N (the empty server's used_memory is included)."
cat "$notes"
