#!/bin/bash
# usage: scripts/cluster-pause.sh [TERN_BINARY] [DIR] -- tern up from BIN; SIGSTOP the mgmd 3 s, then every process 3 s; prints what the cluster did
BIN=${1:-target/debug/tern}; DIR=${2:-/tmp/tern-pause}; rm -rf $DIR; mkdir -p $DIR
P=$((21000 + RANDOM % 5000))
$BIN up --data-dir $DIR/data --datanode-port $P --mgmd-port $((P+10)) --rest-port $((P+11)) --redis-port $((P+12)) --mysql-port $((P+13)) --data-memory 128M > $DIR/out.log 2> $DIR/err.log &
UP=$!
for i in $(seq 1 100); do grep -q ready: $DIR/out.log && break; sleep 0.2; done
M=$(pgrep -P $UP -f mgmd-145)
kill -STOP $M; sleep 3; kill -CONT $M; sleep 3
ALL="$(pgrep -P $UP) $UP"
kill -STOP $ALL; sleep 3; kill -CONT $ALL; sleep 4
echo "declared failed: $(grep -c 'declaring data nodes failed' $DIR/err.log)  fenced: $(grep -c 'stopping this data node at once' $DIR/err.log)  restarts: $(grep -c 'restarting it in' $DIR/err.log)  renewed: $(grep -c 'lease renewed' $DIR/err.log)"
grep -E "declaring|stopping this data node|restarting it|cluster is down" $DIR/err.log | head -6
kill -TERM $UP; wait $UP; echo "tern up exit $?"
