#!/usr/bin/env bash
# Redis collections (issue 35) side by side: redis-benchmark's list, set and sorted-set tests
# against Tern's Redis front end and a redis-server 7 started here, in the same run, alternating
# rounds, with the server CPU per request of each side (user+system time of all its processes,
# from /proc; it does not depend on how the benchmark client shares the cores). SET is measured
# too: each row's ratio is compared with Tern's own SET ratio of the same run.
#
# usage: scripts/peer-redis-collections.sh TERN_PORT [REQUESTS] [ROUNDS]
# Environment:
#   PEER=plain|durable  redis-server without persistence (default), or appendonly everysec plus
#                       one replica process (the setup of ../shared/bench/peer-redis.sh)
#   TERN_PIDS="pid ..." the Tern processes serving (e.g. `tern up`'s pid: its children count)
#   TESTS="lpush,..."   the redis-benchmark tests (default: the issue's list)
#   RESULTS_JSON=FILE   also write the medians as benchmark results (scripts/scoreboard.py reads
#                       bench/results/*.json); TOPOLOGY names the Tern setup there
# Needs redis-server and redis-benchmark (Debian: redis-server redis-tools).
set -euo pipefail
tern_port=${1:?usage: peer-redis-collections.sh TERN_PORT [REQUESTS] [ROUNDS]}
n=${2:-100000}
rounds=${3:-3}
peer_mode=${PEER:-plain}
tests=${TESTS:-set,lpush,rpush,lpop,rpop,sadd,spop,zadd,zpopmin,lrange_100}
for tool in redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y redis-server redis-tools" >&2; exit 2; }
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
peer_port=$(free_port)
dir=$(mktemp -d)
persist=(--save "" --appendonly no)
[ "$peer_mode" = durable ] && persist=(--save "" --appendonly yes --appendfsync everysec)
redis-server --port "$peer_port" --bind 127.0.0.1 "${persist[@]}" --dir "$dir" --daemonize yes \
  --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
peer_pids() { cat "$dir"/*.pid 2>/dev/null || true; }
trap 'for p in $(peer_pids); do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$peer_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
if [ "$peer_mode" = durable ]; then
  rport=$(free_port); mkdir -p "$dir/replica"
  redis-server --port "$rport" --bind 127.0.0.1 "${persist[@]}" --dir "$dir/replica" --daemonize yes \
    --pidfile "$dir/replica.pid" --logfile "$dir/replica.log" --replicaof 127.0.0.1 "$peer_port"
  for _ in $(seq 100); do
    if redis-cli -p "$rport" info replication 2>/dev/null | grep -q 'master_link_status:up'; then break; fi
    sleep 0.1
  done
fi

# user+system clock ticks of the given processes and their descendants (two levels)
ticks() {
  local all=() p c g
  for p in "$@"; do
    all+=("$p")
    for c in $(pgrep -P "$p" 2>/dev/null || true); do
      all+=("$c")
      for g in $(pgrep -P "$c" 2>/dev/null || true); do all+=("$g"); done
    done
  done
  local t=0
  for p in $(printf '%s\n' "${all[@]}" | sort -u); do
    if [ -r "/proc/$p/stat" ]; then t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); fi
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
# port, test -> requests per second (the last CSV line: LRANGE's runs its own LPUSH first). The
# tests of a round run in order on one database, as one `redis-benchmark -t a,b,...` would run
# them: the pops pop what the pushes before them pushed.
rps() {
  redis-benchmark -h 127.0.0.1 -p "$1" -n "$n" -r 100000 -d 100 -c 50 --csv -t "$2" 2>/dev/null \
    | tail -n 1 | awk -F'","' '{gsub(/"/,"",$2); print $2+0}'
}
us_per_op() { python3 -c "print(($2-$1)/$hz/$n*1e6)"; }
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

printf '%-12s %14s %14s %8s %12s %12s\n' test "redis($peer_mode)" tern ratio peer_us/op tern_us/op
set_ratio=""
IFS=',' read -r -a list <<< "$tests"
declare -A ps ts pc tc
results=""
for r in $(seq "$rounds"); do
  redis-cli -p "$peer_port" flushall >/dev/null
  redis-cli -p "$tern_port" flushall >/dev/null
  for t in "${list[@]}"; do
    # shellcheck disable=SC2046
    b=$(ticks $(peer_pids)); x=$(rps "$peer_port" "$t"); a=$(ticks $(peer_pids))
    ps[$t]+=" $x"; pc[$t]+=" $(us_per_op "$b" "$a")"
    if [ -n "${TERN_PIDS:-}" ]; then
      # shellcheck disable=SC2086
      b=$(ticks $TERN_PIDS); x=$(rps "$tern_port" "$t"); a=$(ticks $TERN_PIDS)
      ts[$t]+=" $x"; tc[$t]+=" $(us_per_op "$b" "$a")"
    else
      ts[$t]+=" $(rps "$tern_port" "$t")"; tc[$t]+=" 0"
    fi
  done
done
for t in "${list[@]}"; do
  peer=$(printf '%s\n' ${ps[$t]} | median)
  tern=$(printf '%s\n' ${ts[$t]} | median)
  ratio=$(python3 -c "p=float('${peer:-0}' or 0); t=float('${tern:-0}' or 0); print(f'{t/p:.2f}' if p>0 else '0')")
  pcm=$(printf '%s\n' ${pc[$t]} | median); tcm=$(printf '%s\n' ${tc[$t]} | median)
  printf '%-12s %14s %14s %8s %12.2f %12.2f\n' "$t" "$peer" "$tern" "$ratio" "$pcm" "$tcm"
  results+="$t $peer $tern $ratio $pcm $tcm"$'\n'
  [ "$t" = set ] && set_ratio=$ratio
done
[ -n "$set_ratio" ] && echo "Tern's SET ratio of this run: $set_ratio (the target of every row)"
if [ -n "${RESULTS_JSON:-}" ]; then
  RESULTS="$results" PEER_MODE="$peer_mode" N="$n" ROUNDS="$rounds" python3 - "$RESULTS_JSON" <<'PY'
import json, os, subprocess, sys, datetime
rows = []
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip() or '(unknown)'
cpu = open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].strip(' :\t') if os.path.exists('/proc/cpuinfo') else ''
for line in os.environ['RESULTS'].strip().split('\n'):
    t, peer, tern, ratio, pcm, tcm = line.split()
    rows.append({'workload': f'redis-benchmark {t.upper()} (-c 50 -d 100 -r 100000, one key)',
                 'topology': os.environ.get('TOPOLOGY', 'cluster (2 data nodes, 2 replicas)'), 'unit': 'requests/s',
                 'tern': float(tern), 'peer_name': 'redis-server ' + os.environ['PEER_MODE'], 'peer': float(peer),
                 'ratio': float(ratio), 'tern_cpu_us': float(tcm), 'peer_cpu_us': float(pcm), 'commit': commit,
                 'date': datetime.date.today().isoformat(), 'machine': f'{os.cpu_count()} cores, {cpu}',
                 'command': f"scripts/peer-redis-collections.sh PORT {os.environ['N']} {os.environ['ROUNDS']}"})
json.dump(rows, open(sys.argv[1], 'w'), indent=1)
PY
fi
exit 0
