#!/usr/bin/env bash
# Run the example site: migrate SQLite, seed users/filters/blocklist, serve.
# Called by `make demo` through scripts/with-redis.sh (which exports REDIS_URL).
set -euo pipefail
PY=${1:-python3}
if [[ "$PY" == */* ]]; then  # make passes .venv/bin/python: keep it valid after the cd
  PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
fi
cd "$(dirname "$0")/../example_site"

"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py seed_demo
port=${DEMO_PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
cat <<MSG

  django-bloom example site: http://127.0.0.1:$port/
  admin:                     http://127.0.0.1:$port/admin/   user: admin   password: bloom-demo
  Redis:                     ${REDIS_URL:-redis://127.0.0.1:6379/0}
  Ctrl-C to stop.

MSG
exec "$PY" manage.py runserver "127.0.0.1:$port" --noreload
