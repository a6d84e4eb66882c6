#!/usr/bin/env bash
# Native-client benchmark on a fresh local data node: memory per row, then reads/writes at several
# threads x batch sizes, repeated RUNS times (report medians). Usage:
#   scripts/bench-native.sh [ROWS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
RUNS=${2:-3}
PORT=${TERN_BENCH_PORT:-11870}
cargo build --release -p tern >/dev/null
DIR=$(mktemp -d)
target/release/tern up --data-dir "$DIR" --datanode-port "$PORT" --rest-port "$((PORT + 1))" --redis-port "$((PORT + 2))" --data-memory 4G >"$DIR/up.out" 2>"$DIR/up.err" &
UP=$!
trap 'kill -INT $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do grep -q '^ready:' "$DIR/up.out" 2>/dev/null && break; sleep 0.1; done
ADDR=127.0.0.1:$PORT
echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "# rows: $ROWS"
target/release/tern bench native --addr "$ADDR" --memory --rows "$ROWS" --phases read --seconds 1 --threads 2 --batch 256 --json
for run in $(seq "$RUNS"); do
  target/release/tern bench native --addr "$ADDR" --rows "$ROWS" --phases read --seconds 3 --threads 1 --batch 1,64,256 --json
  target/release/tern bench native --addr "$ADDR" --rows "$ROWS" --phases read --seconds 3 --threads 2,4 --batch 64,256 --json
  target/release/tern bench native --addr "$ADDR" --rows "$ROWS" --phases update --threads 1,2 --batch 1,64 --json
done
