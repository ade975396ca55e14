#!/usr/bin/env bash
# Run a command with a Redis available, exported as REDIS_URL.
# Uses the Redis on 127.0.0.1:6379 when it answers PING; otherwise starts a
# throwaway redis-server on a free port (no persistence) and stops it on exit.
set -euo pipefail

ping_redis() {  # ping_redis PORT -> 0 if a Redis answers PONG
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  local reply=""
  read -r -t 2 reply <&3 || true
  exec 3>&- 3<&-
  [[ "$reply" == +PONG* ]]
}

if [[ -z "${REDIS_URL:-}" ]]; then
  if ping_redis "${BLOOM_DEFAULT_REDIS_PORT:-6379}"; then
    export REDIS_URL="redis://127.0.0.1:${BLOOM_DEFAULT_REDIS_PORT:-6379}/0"
  else
    command -v redis-server >/dev/null || {
      echo "No Redis on 127.0.0.1:6379 and no redis-server to start one." >&2
      echo "Install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)." >&2
      exit 1
    }
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    dir=$(mktemp -d)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$dir" --logfile "$dir/redis.log" --daemonize no &
    redis_pid=$!
    trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$dir"' EXIT
    for _ in $(seq 50); do ping_redis "$port" && break; sleep 0.1; done
    ping_redis "$port" || { echo "redis-server did not start; see $dir/redis.log" >&2; exit 1; }
    echo "Started a local redis-server on 127.0.0.1:$port (stopped on exit)" >&2
    export REDIS_URL="redis://127.0.0.1:$port/0"
  fi
fi
"$@"
