#!/usr/bin/env bash
# Rank operations on one big sorted set and random picks from one big set (issue 35: "rank
# operations in O(log n) on big sets"): loads N members into a sorted set and a set on Tern's
# Redis front end and on a redis-server 7 started here, then runs redis-benchmark on each side in
# the same run for ZRANK of the last member, ZCOUNT of the whole set, a 10-member rank range in
# the middle, a LIMIT offset in the middle, ZRANDMEMBER and SRANDMEMBER. Prints requests/s per
# side; a cost that grew with N would show as a rate that falls with N.
#
# usage: scripts/redis-rank-bench.sh TERN_PORT [N] [REQUESTS]
set -euo pipefail
tern_port=${1:?usage: redis-rank-bench.sh TERN_PORT [N] [REQUESTS]}
n=${2:-1000000}
reqs=${3:-5000}
# shellcheck source=redis-peer.sh
PEER_TOOLS=redis-benchmark . "$(dirname "$0")/redis-peer.sh"

for port in "$tern_port" "$peer_port"; do
  redis-cli -p "$port" del rk rs >/dev/null
  { resp_members zset rk "$n"; resp_members set rs "$n"; } | redis-cli -p "$port" --pipe >/dev/null
  [ "$(redis-cli -p "$port" zcard rk)" = "$n" ] || { echo "load into $port failed" >&2; exit 1; }
done
last=$(printf 'member:%010d' $((n - 1)))
mid=$((n / 2))
printf '%-36s %12s %12s %8s\n' "command (N=$n)" "Tern rps" "redis rps" "ratio"
run() {
  local label=$1; shift
  local t p
  t=$(redis-benchmark -p "$tern_port" -n "$reqs" -c 8 -q "$@" 2>/dev/null | awk '{for(i=1;i<=NF;i++) if($i=="requests") print $(i-1)}' | tail -1)
  p=$(redis-benchmark -p "$peer_port" -n "$reqs" -c 8 -q "$@" 2>/dev/null | awk '{for(i=1;i<=NF;i++) if($i=="requests") print $(i-1)}' | tail -1)
  printf '%-36s %12s %12s %8s\n' "$label" "${t:-?}" "${p:-?}" "$(python3 -c "print(f'{float(\"${t:-0}\")/max(float(\"${p:-1}\"),1e-9):.2f}')")"
}
run "ZRANK rk <last>" ZRANK rk "$last"
run "ZCOUNT rk -inf +inf" ZCOUNT rk -inf +inf
run "ZRANGE rk N/2 N/2+9" ZRANGE rk "$mid" $((mid + 9))
run "ZRANGEBYSCORE rk -inf +inf LIMIT N/2 10" ZRANGEBYSCORE rk -inf +inf LIMIT "$mid" 10
run "ZRANDMEMBER rk" ZRANDMEMBER rk
run "SRANDMEMBER rs" SRANDMEMBER rs
