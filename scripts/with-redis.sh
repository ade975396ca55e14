#!/usr/bin/env bash
# Run a command with a Redis available, exported as REDIS_URL.
# Uses the Redis on 127.0.0.1:6379 when it answers PING; otherwise starts a
# throwaway redis-server on a free port (no persistence) and stops it on exit.
# BLOOM_REDIS_SERVERS=N (make test TEST_WORKERS=N) also starts N private servers, one per
# pytest-xdist worker, exported as BLOOM_WORKER_REDIS_URLS (tests/settings.py gives worker
# gwI the I-th): the suite sends its Redis heavy commands (multi-megabyte creates and
# uploads, 500,000-probe reads, SCRIPT FLUSH), which must not stall another worker's reads
# past the engine's 0.2 s SOCKET_TIMEOUT. (Tests that reconfigure a server use private ones.)
set -euo pipefail

ping_redis() {  # ping_redis PORT -> 0 if a Redis answers PONG
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  local reply=""
  read -r -t 2 reply <&3 || true
  exec 3>&- 3<&-
  [[ "$reply" == +PONG* ]]
}

pids=()
dirs=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for dir in "${dirs[@]}"; do rm -rf "$dir"; done
}
trap cleanup EXIT

start_redis() {  # start_redis: a new throwaway redis-server; its URL in started_url
  local port dir
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" --daemonize no &
  pids+=($!)
  dirs+=("$dir")
  for _ in $(seq 50); do ping_redis "$port" && break; sleep 0.1; done
  ping_redis "$port" || { echo "redis-server did not start; see $dir/redis.log" >&2; exit 1; }
  started_url="redis://127.0.0.1:$port/0"
}

need_redis_server() {
  command -v redis-server >/dev/null || {
    echo "No Redis on 127.0.0.1:6379 and no redis-server to start one." >&2
    echo "Install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)." >&2
    exit 1
  }
}

if [[ -z "${REDIS_URL:-}" ]]; then
  if ping_redis "${BLOOM_DEFAULT_REDIS_PORT:-6379}"; then
    export REDIS_URL="redis://127.0.0.1:${BLOOM_DEFAULT_REDIS_PORT:-6379}/0"
  else
    need_redis_server
    start_redis
    echo "Started a local redis-server at $started_url (stopped on exit)" >&2
    export REDIS_URL="$started_url"
  fi
fi
if [[ ! "${BLOOM_REDIS_SERVERS:-0}" =~ ^[0-9]+$ ]]; then
  echo "BLOOM_REDIS_SERVERS (make test's TEST_WORKERS) must be a number, got '$BLOOM_REDIS_SERVERS'" >&2
  exit 2
fi
if [[ "${BLOOM_REDIS_SERVERS:-0}" -gt 0 ]]; then
  need_redis_server
  urls=()
  for _ in $(seq "$BLOOM_REDIS_SERVERS"); do start_redis; urls+=("$started_url"); done
  echo "Started ${#urls[@]} redis-servers, one per test worker (stopped on exit)" >&2
  export BLOOM_WORKER_REDIS_URLS="${urls[*]}"
fi
"$@"
