#!/usr/bin/env bash
# Compares two builds of tern on the hot paths in one run, alternating (A B, B A, A B ...):
# each round starts the default `tern up` cluster (1 mgmd, 2 data nodes, 2 replicas, API server)
# from that binary on a fresh data directory and runs the peer benchmarks against it:
#   - ../shared/bench/peer-redis.sh (redis-benchmark vs redis-server, with server CPU µs per
#     request of both sides from /proc),
#   - ../shared/bench/peer-sysbench.sh (sysbench OLTP vs MariaDB),
#   - `tern bench native` (batched primary-key reads).
# Every output line is prefixed with the binary's label and the round, so medians per label can
# be taken with grep. Bounded: every benchmark runs for a fixed count or time.
#
# usage: scripts/bench-ab.sh A_TERN B_TERN [ROUNDS]
# Env: REQUESTS (redis-benchmark requests per test, default 50000), SB_TIME (sysbench seconds
#      per run, default 5), SB_THREADS (default "1 16"), WORKLOADS (sysbench, default
#      "oltp_point_select oltp_read_write"), TABLE_SIZE (default 20000), PEER_BENCH (the
#      directory of the peer scripts, default ../shared/bench beside the repository), BASE_PORT
#      (default 21000).
# Needs what the peer scripts need: redis-server, redis-tools, sysbench, mariadb-server.
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: bench-ab.sh A_TERN B_TERN [ROUNDS]}
b=${2:?usage: bench-ab.sh A_TERN B_TERN [ROUNDS]}
rounds=${3:-2}
peer=${PEER_BENCH:-$(cd .. && pwd)/shared/bench}
[ -x "$peer/peer-redis.sh" ] || { echo "no peer scripts in $peer (set PEER_BENCH)" >&2; exit 2; }
base=${BASE_PORT:-21000}
export TABLE_SIZE=${TABLE_SIZE:-20000} WORKLOADS=${WORKLOADS:-oltp_point_select oltp_read_write}
read -r -a sb_threads <<<"${SB_THREADS:-1 16}"

up_pid=""
dir=""
stop_up() {
  if [ -n "$up_pid" ]; then
    kill -INT "$up_pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
    up_pid=""
  fi
  [ -n "$dir" ] && rm -rf "$dir"
  dir=""
}
trap stop_up EXIT

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "# A=$a ($(stat -c %s "$a") bytes)"
echo "# B=$b ($(stat -c %s "$b") bytes)"
for r in $(seq "$rounds"); do
  # The order flips every round (the first of a pair can measure faster whichever build it is).
  order="A B"
  [ $((r % 2)) -eq 0 ] && order="B A"
  for label in $order; do
    bin=$a; [ "$label" = B ] && bin=$b
    dir=$(mktemp -d)
    "$bin" up --data-dir "$dir/data" --mgmd-port "$base" --datanode-port "$((base + 10))" \
      --rest-port "$((base + 20))" --redis-port "$((base + 21))" --mysql-port "$((base + 22))" \
      >"$dir/up.out" 2>"$dir/up.err" &
    up_pid=$!
    for _ in $(seq 600); do grep -q '^ready:' "$dir/up.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready:' "$dir/up.out" || { echo "$label: tern up did not start"; cat "$dir/up.err" >&2; exit 1; }
    tag="$label r$r"
    TERN_PIDS="$up_pid" "$peer/peer-redis.sh" "$((base + 21))" "${REQUESTS:-50000}" 1 2>&1 | sed "s/^/$tag redis  /"
    "$peer/peer-sysbench.sh" "$((base + 22))" "${SB_TIME:-5}" "${sb_threads[@]}" 2>&1 | sed "s/^/$tag sysbench  /"
    "$bin" bench native --addr "127.0.0.1:$((base + 10))" --rows 100000 --phases insert,read \
      --seconds 3 --threads 2 --batch 1,64,256 --json 2>&1 | grep -v '"phase":"insert"' | sed "s/^/$tag native  /"
    stop_up
  done
done
