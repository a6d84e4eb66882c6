#!/usr/bin/env bash
# Side by side: two builds of tern, each running the default `tern up` cluster at the same time,
# and redis-benchmark alternating between them (A B, B A, A B ...) so that both see the same
# host noise. Prints throughput and server CPU µs per request (user+system of every process of that
# cluster, from /proc) per run. Bounded: ROUNDS runs of REQUESTS requests per test and build.
#
# usage: scripts/bench-ab-redis.sh A_TERN B_TERN [ROUNDS] [REQUESTS]
# Env: CLIENTS (redis-benchmark connections, default "50"; e.g. "50 1": the pipelined tests run
#      with 50 only, a run with fewer clients sends a fifth of REQUESTS).
# Needs redis-benchmark (Debian: redis-tools) and pstree (psmisc).
set -euo pipefail
a=${1:?usage: bench-ab-redis.sh A_TERN B_TERN [ROUNDS] [REQUESTS]}
b=${2:?usage: bench-ab-redis.sh A_TERN B_TERN [ROUNDS] [REQUESTS]}
rounds=${3:-4}
n=${4:-100000}
clients=${CLIENTS:-50}
da=$(mktemp -d)
db=$(mktemp -d)
pa=""
pb=""
cleanup() {
  for p in $pa $pb; do kill -INT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$da" "$db"
}
trap cleanup EXIT
"$a" up --data-dir "$da/d" --mgmd-port 23000 --datanode-port 23010 --rest-port 23020 --redis-port 23021 --mysql-port 23022 >"$da/out" 2>"$da/err" &
pa=$!
"$b" up --data-dir "$db/d" --mgmd-port 24000 --datanode-port 24010 --rest-port 24020 --redis-port 24021 --mysql-port 24022 >"$db/out" 2>"$db/err" &
pb=$!
for _ in $(seq 600); do grep -q '^ready:' "$da/out" 2>/dev/null && grep -q '^ready:' "$db/out" 2>/dev/null && break; sleep 0.1; done
grep -q '^ready:' "$da/out" && grep -q '^ready:' "$db/out" || { echo "a cluster did not start" >&2; exit 1; }
hz=$(getconf CLK_TCK)
# user+system ticks of a process tree (processes only: -T leaves threads out)
ticks() {
  local t=0 p
  for p in $(pstree -pT "$1" | grep -o '([0-9]*)' | tr -d '()'); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat")))
  done
  echo "$t"
}
for c in $clients; do
for test in "set -P 16" "get -P 16" "set" "get"; do
  [ "$c" -lt 50 ] && [ "${test#*-P}" != "$test" ] && continue
  for i in $(seq "$rounds"); do
    # The order flips every round: the first of a pair measured faster whichever build it was.
    order="A B"
    [ $((i % 2)) -eq 0 ] && order="B A"
    for lab in $order; do
      port=23021; pid=$pa
      [ "$lab" = B ] && port=24021 && pid=$pb
      t0=$(ticks "$pid")
      # shellcheck disable=SC2086
      # fewer requests for few clients: each run stays a few seconds
      m=$(( c < 50 ? n / 5 : n ))
      r=$(redis-benchmark -h 127.0.0.1 -p "$port" -n "$m" -r 100000 -d 100 -c "$c" -t $test --csv 2>/dev/null | tail -1 | awk -F'","' '{gsub(/"/,"",$2); print $2}')
      t1=$(ticks "$pid")
      echo "$lab c$c $test: $r requests/s, $(python3 -c "print(round(($t1 - $t0) / $hz / $m * 1e6, 2))") server µs/request"
    done
  done
done
done
