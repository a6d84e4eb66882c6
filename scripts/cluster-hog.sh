#!/bin/bash
# usage: [HOGS=8] [HOGNICE=0] [IOHOGS=0] scripts/cluster-hog.sh [TERN_BINARY] [DIR] -- starts tern up (default cluster) from BIN on DIR, 8 busy processes for 30 s under redis-benchmark SETs, prints failures seen
BIN=${1:-target/debug/tern}; DIR=${2:-/tmp/tern-hog}; rm -rf $DIR; mkdir -p $DIR
P=$((21000 + RANDOM % 5000))
$BIN up --data-dir $DIR/data --datanode-port $P --mgmd-port $((P+10)) --rest-port $((P+11)) --redis-port $((P+12)) --mysql-port $((P+13)) --data-memory 128M > $DIR/out.log 2> $DIR/err.log &
UP=$!
for i in $(seq 1 100); do grep -q ready: $DIR/out.log && break; sleep 0.2; done
grep ready: $DIR/out.log | head -1
for i in $(seq ${HOGS:-8}); do timeout 30 nice -n ${HOGNICE:-0} sh -c 'while :; do :; done' & done
for i in $(seq ${IOHOGS:-0}); do timeout 30 sh -c "while :; do dd if=/dev/zero of=$DIR/io.\$\$ bs=1M count=64 conv=fsync 2>/dev/null; done" & done
timeout 32 redis-benchmark -p $((P+12)) -t set -n 2000000 -c 4 -q > $DIR/bench.log 2>&1
sleep 2
echo "declared failed: $(grep -c 'declaring data nodes failed' $DIR/err.log)  fenced: $(grep -c 'stopping this data node at once' $DIR/err.log)  restarts: $(grep -c 'restarting it in' $DIR/err.log)  lateness credited: $(grep -c 'not scheduled' $DIR/err.log)"
grep -E "declaring|stopping this data node|restarting it" $DIR/err.log | head -5
tail -c 300 $DIR/bench.log | tr '\r' '\n' | tail -2
kill -TERM $UP; wait $UP; echo "tern up exit $?"
