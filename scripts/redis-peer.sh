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
