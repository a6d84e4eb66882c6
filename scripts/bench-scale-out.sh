#!/usr/bin/env bash
# Scale-out figures (issue 34): the partition-move rate, the client-visible stall while a node
# group is added under load, and server CPU per operation with one and with two node groups.
#
# Starts its own cluster on free ports under a temporary directory: one management node and data
# nodes 1-2 (node group 0, 2 replicas, 1 ldm worker each). Loads ROWS rows of bench.flex (26 INT
# columns) with `tern bench native`, measures reads and updates with the server CPU per operation
# of every cluster process (TERN_SERVER_PIDS); adds data nodes 3-4 as node group 1 without
# reorganising (`tern mgm -e "CREATE NODEGROUP … NOREORGANIZE"`, then starts them) and measures
# again (the same data layout with four data node processes on this host); then, while a read
# load and an update pass run, moves half the partitions there (`ALTER TABLE bench.flex
# REORGANIZE PARTITION`) and waits until every move is done: the move rate is the rows (and
# bytes) node 3 then holds over that time, the stall the slowest batch of the loads (the `Max`
# column). Then the same reads and updates with two node groups. Before each measurement, the
# idle CPU of every cluster process over 5 s.
#
# Usage: scripts/bench-scale-out.sh [ROWS] [SECONDS]
#   TERN=path/to/tern (default: target/release/tern when built, else target/debug/tern)
#   SPIN_US=N: the data nodes' spin_max_us (default theirs, 50)
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
SECONDS_RUN=${2:-10}
TERN=${TERN:-}
if [ -z "$TERN" ]; then
  if [ -x target/release/tern ]; then TERN=target/release/tern; else TERN=target/debug/tern; fi
fi
[ -x "$TERN" ] || { echo "no tern binary at $TERN (cargo build --release -p tern)" >&2; exit 1; }
DIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# Five consecutive free ports below the ephemeral range.
free_base() {
  for _ in $(seq 1 200); do
    local b=$((20000 + RANDOM % 10000)) ok=1
    for k in 0 1 2 3 4; do
      if (echo > /dev/tcp/127.0.0.1/$((b + k))) 2>/dev/null; then ok=0; break; fi
    done
    [ "$ok" = 1 ] && { echo "$b"; return; }
  done
  echo "no free ports" >&2; exit 1
}
BASE=$(free_base)
MGMD=127.0.0.1:$BASE
dn() { echo "127.0.0.1:$((BASE + $1))"; }
cat > "$DIR/cluster.toml" <<EOF
replicas = 2
ldm_workers = 1
epoch_interval_ms = 100
heartbeat_interval_ms = 250
failure_timeout_ms = 3000

[[mgmd]]
id = 145
host = "127.0.0.1"
port = $BASE

[[datanode]]
id = 1
host = "127.0.0.1"
port = $((BASE + 1))

[[datanode]]
id = 2
host = "127.0.0.1"
port = $((BASE + 2))
EOF
for n in 1 2 3 4; do
  printf 'data_dir = "%s"\ndata_memory = "2G"\n' "$DIR/dn$n" > "$DIR/dn$n.toml"
  # SPIN_US=0: workers never poll idle (what the node does then is only the work, which is what
  # to compare on 2 cores shared by four data nodes).
  [ -n "${SPIN_US:-}" ] && printf 'spin_max_us = %s\n' "$SPIN_US" >> "$DIR/dn$n.toml"
done
export TERN_LOG=${TERN_LOG:-warn}
"$TERN" mgmd --config "$DIR/cluster.toml" --node-id 145 --data-dir "$DIR/mgmd" 2> "$DIR/mgmd.log" &
PIDS+=($!)
start_dn() {
  "$TERN" datanode --config "$DIR/dn$1.toml" --mgmd "$MGMD" --node-id "$1" 2> "$DIR/dn$1.log" &
  PIDS+=($!)
}
# Waits until `tern status --mgmd` shows N data nodes started.
wait_started() {
  for _ in $(seq 1 600); do
    local n
    n=$("$TERN" status --mgmd "$MGMD" --json 2>/dev/null | grep -o '"state": *"started"' | wc -l || true)
    [ "$n" -ge "$1" ] && return 0
    sleep 0.2
  done
  echo "the data nodes did not start; logs in $DIR" >&2; tail -5 "$DIR"/*.log >&2; exit 1
}
start_dn 1
start_dn 2
wait_started 2
ADDRS="$(dn 1),$(dn 2)"
echo "== $TERN, $ROWS rows, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
echo "== load"
"$TERN" bench native --addr "$ADDRS" --rows "$ROWS" --phases insert --threads 2 --batch 500
measure() {
  echo "== $1: reads (batch 64) and an update pass (batch 64), 2 threads, server CPU of every cluster process"
  TERN_SERVER_PIDS="${PIDS[*]}" "$TERN" bench native --addr "$2" --mgmd "$MGMD" --rows "$ROWS" --phases read,update \
    --seconds "$SECONDS_RUN" --threads 2 --batch 64
  echo "-- and single-key read transactions (batch 1; each starts on a node holding its row)"
  TERN_SERVER_PIDS="${PIDS[*]}" "$TERN" bench native --addr "$2" --mgmd "$MGMD" --rows "$ROWS" --phases read \
    --seconds "$SECONDS_RUN" --threads 2 --batch 1 | tail -1
}
# Server CPU of each cluster process while nothing runs (idle polling, heartbeats, epochs,
# checkpoints), over 5 s.
idle_cpu() {
  python3 - "${PIDS[@]}" <<'EOF'
import os, sys, time
hz = os.sysconf("SC_CLK_TCK")
def ticks(p):
    with open(f"/proc/{p}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])
pids = sys.argv[1:]
a = {p: ticks(p) for p in pids}
time.sleep(5)
b = {p: ticks(p) for p in pids}
print("idle CPU per process (% of a core): " + ", ".join(f"{p}: {100 * (b[p] - a[p]) / hz / 5:.1f}" for p in pids)
      + f"; all: {100 * sum(b[p] - a[p] for p in pids) / hz / 5:.1f}")
EOF
}
idle_cpu
measure "one node group" "$ADDRS"

# The new group's nodes join first, without reorganising: the same one-group data layout, now
# with four data node processes on this host. What follows separates what more processes cost
# here from what spreading the rows over two groups costs.
"$TERN" mgm --mgmd "$MGMD" -e "CREATE NODEGROUP 3@$(dn 3), 4@$(dn 4) NOREORGANIZE"
start_dn 3
start_dn 4
wait_started 4
sleep 2
idle_cpu
measure "one node group, with nodes 3-4 started and empty" "$ADDRS,$(dn 3),$(dn 4)"

echo "== moving half the partitions to node group 1 under a read load and an update pass"
"$TERN" bench native --addr "$ADDRS" --rows "$ROWS" --phases read --seconds 60 --threads 1 --batch 16 \
  > "$DIR/load-read.txt" 2>&1 &
READER=$!
"$TERN" bench native --addr "$ADDRS" --rows "$ROWS" --phases update --threads 1 --batch 16 \
  > "$DIR/load-update.txt" 2>&1 &
WRITER=$!
sleep 3
T0=$(date +%s.%N)
"$TERN" mgm --mgmd "$MGMD" -e "ALTER TABLE bench.flex REORGANIZE PARTITION"
# Moves are done when SHOW lists none running and node group 1 holds partitions.
for _ in $(seq 1 3000); do
  SHOW=$("$TERN" mgm --mgmd "$MGMD" -e SHOW)
  if ! grep -q "Partition moves running" <<< "$SHOW"; then
    ROWS3=$("$TERN" status --addr "$(dn 3)" --json | grep -o '"rows": *[0-9]*' | head -1 | grep -o '[0-9]*$')
    [ "${ROWS3:-0}" -gt 0 ] && break
  fi
  sleep 0.1
done
T1=$(date +%s.%N)
STATUS3=$("$TERN" status --addr "$(dn 3)" --json)
ROWS3=$(grep -o '"rows": *[0-9]*' <<< "$STATUS3" | head -1 | grep -o '[0-9]*$')
MEM3=$(grep -o '"memory_used": *[0-9]*' <<< "$STATUS3" | head -1 | grep -o '[0-9]*$')
wait "$READER" "$WRITER" || true
python3 - "$T0" "$T1" "$ROWS3" "$MEM3" <<'EOF'
import sys
t0, t1, rows, mem = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = t1 - t0
print(f"moved: {rows} rows ({mem / 1e6:.1f} MB of data memory on node 3) in {s:.1f} s from ALTER TABLE … "
      f"REORGANIZE PARTITION: {rows / s:,.0f} rows/s, {mem / 1e6 / s:.1f} MB/s")
EOF
echo "-- the loads while the group was added (Max: the slowest batch, with its retries)"
cat "$DIR/load-read.txt" "$DIR/load-update.txt" | grep -v '^---' | awk '!seen[$0]++'
# Let the old copies go and the placement settle.
sleep 3
idle_cpu
measure "two node groups" "$ADDRS,$(dn 3),$(dn 4)"
