#!/usr/bin/env bash
# sysbench OLTP against an already running Tern MySQL port and against MariaDB started here, in
# the same run, alternating rounds, medians; with the server CPU per transaction of both sides
# (user+system time of every server process, from /proc: independent of how sysbench shares the
# cores with the servers).
#
# usage: scripts/bench-sysbench.sh TERN_PORT [TIME_S] [ROUNDS] [THREADS...]
#   TERN_PORT  the Tern MySQL port on 127.0.0.1 (user root, no password)
#   TIME_S     seconds per run (default 10); ROUNDS alternating rounds (default 3)
#   THREADS    sysbench thread counts (default: 1 16)
# Env:
#   TERN_PIDS="pid ..."  Tern's server processes (`tern up`'s pid: its children count too)
#   PEER=durable  MariaDB as users run it for safety: InnoDB defaults (an fsync of the redo log
#                 at every commit, innodb_flush_log_at_trx_commit=1) plus the binary log with
#                 sync_binlog=1 (default)
#   PEER=semisync the same primary plus a replica process on this host with semi-synchronous
#                 replication (a commit is answered once the replica has its events): the
#                 guarantees closest to a 2-replica Tern cluster with durable commits
#   PEER=plain    InnoDB defaults, no binary log (what ../shared/bench/peer-sysbench.sh runs)
#   WORKLOADS (default: oltp_point_select oltp_read_only oltp_read_write oltp_write_only;
#   oltp_insert with 1 thread is the single-client autocommit INSERT rate), TABLES (4),
#   TABLE_SIZE (20000), PS_MODE (auto|disable)
#   TERN_B_PORT, TERN_B_PIDS  a second Tern (another build or setting) measured in the same
#                 rounds: three more columns (its tps, ratio to MariaDB, µs per transaction)
# Prints: workload threads mariadb_tps tern_tps ratio mariadb_us/txn tern_us/txn; a last line
# "min ratio: X". Needs sysbench and mariadb-server (Debian packages). Bounded: every run lasts
# TIME_S; the MariaDB processes and their directory are removed at exit.
set -euo pipefail
tern_port=${1:?usage: bench-sysbench.sh TERN_PORT [TIME_S] [ROUNDS] [THREADS...]}
time_s=${2:-10}
rounds=${3:-3}
shift $(( $# >= 3 ? 3 : $# ))
threads=("$@"); [ ${#threads[@]} -eq 0 ] && threads=(1 16)
tables=${TABLES:-4}; size=${TABLE_SIZE:-20000}; ps_mode=${PS_MODE:-auto}; mode=${PEER:-durable}
workloads=${WORKLOADS:-oltp_point_select oltp_read_only oltp_read_write oltp_write_only}
for tool in sysbench mariadbd mariadb-install-db mariadb; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y sysbench mariadb-server mariadb-client" >&2; exit 2; }
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
# start_mariadb NAME PORT EXTRA_ARGS...: a MariaDB in $dir/NAME, waits until it answers.
start_mariadb() {
  local name=$1 port=$2; shift 2
  mariadb-install-db --no-defaults --datadir="$dir/$name" --user=root --auth-root-authentication-method=normal \
    >"$dir/$name-install.log" 2>&1
  mariadbd --no-defaults --datadir="$dir/$name" --port="$port" --bind-address=127.0.0.1 --socket="$dir/$name.sock" \
    --user=root --pid-file="$dir/$name.pid" --log-error="$dir/$name.err" "$@" &
  pids+=($!)
  for _ in $(seq 150); do mariadb --socket="$dir/$name.sock" -uroot -e 'select 1' >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "MariaDB $name did not start: $(tail -5 "$dir/$name.err")" >&2
  exit 1
}
peer_port=$(free_port)
case "$mode" in
  plain) start_mariadb primary "$peer_port" ;;
  durable) start_mariadb primary "$peer_port" --server-id=1 --log-bin="$dir/binlog" --sync-binlog=1 ;;
  semisync)
    start_mariadb primary "$peer_port" --server-id=1 --log-bin="$dir/binlog" --sync-binlog=1 \
      --rpl-semi-sync-master-enabled=ON --rpl-semi-sync-master-timeout=10000
    rport=$(free_port)
    start_mariadb replica "$rport" --server-id=2 --rpl-semi-sync-slave-enabled=ON --read-only=ON
    mariadb --socket="$dir/primary.sock" -uroot -e \
      "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'; GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'"
    mariadb --socket="$dir/replica.sock" -uroot -e \
      "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$peer_port, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos; START SLAVE"
    for _ in $(seq 100); do
      st=$(mariadb --socket="$dir/primary.sock" -uroot -N -e "SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'" | awk '{print $2}')
      [ "${st:-0}" -ge 1 ] && break
      sleep 0.2
    done
    [ "${st:-0}" -ge 1 ] || { echo "the semi-synchronous replica did not connect: $(tail -5 "$dir/replica.err")" >&2; exit 1; }
    ;;
  *) echo "PEER must be plain, durable or semisync" >&2; exit 2 ;;
esac
peer_pids() { cat "$dir"/*.pid 2>/dev/null; }
# user+system clock ticks of the given processes and their children and grandchildren
ticks() {
  local all=() p c g
  for p in "$@"; do
    all+=("$p")
    for c in $(pgrep -P "$p" 2>/dev/null); do all+=("$c"); for g in $(pgrep -P "$c" 2>/dev/null); do all+=("$g"); done; done
  done
  local t=0
  for p in $(printf '%s\n' "${all[@]}" | sort -u); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
common="--db-driver=mysql --mysql-host=127.0.0.1 --mysql-user=root --mysql-db=sbtest --tables=$tables --table-size=$size --db-ps-mode=$ps_mode"
prep() { # port
  mariadb -h127.0.0.1 -P"$1" -uroot -e 'DROP DATABASE IF EXISTS sbtest; CREATE DATABASE sbtest' >/dev/null
  # shellcheck disable=SC2086
  sysbench oltp_read_write $common --mysql-port="$1" prepare >/dev/null
}
# run PORT WORKLOAD THREADS PIDS... -> "tps us_per_txn"
run() {
  local port=$1 w=$2 t=$3; shift 3
  local b a out
  b=$(ticks "$@")
  # shellcheck disable=SC2086
  out=$(sysbench "$w" $common --mysql-port="$port" --threads="$t" --time="$time_s" --report-interval=0 run 2>&1 || true)
  a=$(ticks "$@")
  echo "$out" | awk -v d=$((a - b)) -v hz="$hz" '/transactions:/ {gsub(/\(/,"",$2); gsub(/\(/,"",$3);
    n=$2; tps=$3; printf "%s %.1f\n", tps, (n > 0 ? d / hz / n * 1e6 : 0)}'
}
median() { sort -g | awk '{a[NR]=$1} END{print (NR ? a[int((NR+1)/2)] : 0)}'; }
prep "$peer_port"
prep "$tern_port"
b_port=${TERN_B_PORT:-}
[ -z "$b_port" ] || prep "$b_port"
echo "# PEER=$mode, $rounds alternating rounds of ${time_s}s, medians; CPU = all server processes"
printf '%-20s %7s %10s %10s %6s %10s %10s' workload threads mariadb tern ratio maria_us tern_us
[ -z "$b_port" ] && echo || printf ' %10s %6s %10s\n' tern_b ratio_b tern_b_us
min=""
for w in $workloads; do
  for t in "${threads[@]}"; do
    pt=(); pc=(); tt=(); tc=(); bt=(); bc=()
    for _ in $(seq "$rounds"); do
      # shellcheck disable=SC2046
      read -r x y <<<"$(run "$peer_port" "$w" "$t" $(peer_pids))"; pt+=("${x:-0}"); pc+=("${y:-0}")
      # shellcheck disable=SC2086
      read -r x y <<<"$(run "$tern_port" "$w" "$t" ${TERN_PIDS:-})"; tt+=("${x:-0}"); tc+=("${y:-0}")
      if [ -n "$b_port" ]; then
        # shellcheck disable=SC2086
        read -r x y <<<"$(run "$b_port" "$w" "$t" ${TERN_B_PIDS:-})"; bt+=("${x:-0}"); bc+=("${y:-0}")
      fi
    done
    p=$(printf '%s\n' "${pt[@]}" | median); tn=$(printf '%s\n' "${tt[@]}" | median)
    pcu=$(printf '%s\n' "${pc[@]}" | median); tcu=$(printf '%s\n' "${tc[@]}" | median)
    ratio=$(python3 -c "p=float('$p' or 0); t=float('$tn' or 0); print(f'{t/p:.2f}' if p>0 else '0')")
    [ -n "${TERN_PIDS:-}" ] || tcu="n/a"
    printf '%-20s %7s %10s %10s %6s %10s %10s' "$w" "$t" "$p" "$tn" "$ratio" "$pcu" "$tcu"
    if [ -n "$b_port" ]; then
      bn=$(printf '%s\n' "${bt[@]}" | median); bcu=$(printf '%s\n' "${bc[@]}" | median)
      [ -n "${TERN_B_PIDS:-}" ] || bcu="n/a"
      printf ' %10s %6s %10s\n' "$bn" "$(python3 -c "p=float('$p' or 0); t=float('$bn' or 0); print(f'{t/p:.2f}' if p>0 else '0')")" "$bcu"
    else
      echo
    fi
    min=$(python3 -c "print(min(float('$ratio'), float('${min:-1e9}')))")
  done
done
echo "min ratio: $min"
