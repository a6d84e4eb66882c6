# Sourced by the Redis benchmark scripts: checks the tools (and those in PEER_TOOLS) are installed, starts
# a plain redis-server 7 (no persistence) on a free 127.0.0.1 port in a temporary directory,
# stopped and removed when the script exits. Sets `peer_port` and `dir`.
for tool in redis-server redis-cli python3 ${PEER_TOOLS:-}; do
  command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 2; }
done
peer_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$peer_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes \
  --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$peer_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# resp_members KIND KEY N: RESP commands adding N members of 16 bytes ("member:<10 digits>",
# 1,000 per command) to KEY: RPUSH for KIND list, SADD for set, ZADD (score = index) for zset.
resp_members() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
kind, key, n = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
out = sys.stdout.buffer
def cmd(args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
for start in range(0, n, 1000):
    ms = [b"member:%010d" % i for i in range(start, min(n, start + 1000))]
    if kind == "list":
        cmd([b"RPUSH", key] + ms)
    elif kind == "set":
        cmd([b"SADD", key] + ms)
    else:
        args = [b"ZADD", key]
        for i, m in enumerate(ms):
            args += [b"%d" % (start + i), m]
        cmd(args)
PY
}
