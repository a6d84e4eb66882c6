#!/usr/bin/env bash
# Memory per element of one big list, set and sorted set (issue 35): loads N members into one key
# of each type on Tern's Redis front end and on a redis-server 7 started here, and prints each
# side's `INFO memory` used_memory growth per element (Tern's is one data node's data memory: a
# replica's copy, as redis-server's is its one copy).
#
# usage: scripts/redis-collection-memory.sh TERN_PORT [N]
set -euo pipefail
tern_port=${1:?usage: redis-collection-memory.sh TERN_PORT [N]}
n=${2:-1000000}
# shellcheck source=redis-peer.sh
. "$(dirname "$0")/redis-peer.sh"

used() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: '$1=="used_memory"{print $2}'; }
printf '%-6s %10s %16s %16s %8s\n' type members redis_bytes/elem tern_bytes/elem ratio
for kind in list set zset; do
  row=()
  for port in "$peer_port" "$tern_port"; do
    redis-cli -p "$port" flushall >/dev/null
    sleep 2
    before=$(used "$port")
    resp_members "$kind" big "$n" | redis-cli -p "$port" --pipe >/dev/null
    sleep 2
    after=$(used "$port")
    row+=("$(python3 -c "print(f'{($after-$before)/$n:.1f}')")")
  done
  ratio=$(python3 -c "print(f'{${row[1]}/${row[0]}:.2f}')")
  printf '%-6s %10s %16s %16s %8s\n' "$kind" "$n" "${row[0]}" "${row[1]}" "$ratio"
  redis-cli -p "$tern_port" flushall >/dev/null
done
