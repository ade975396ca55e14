#!/usr/bin/env bash
# Run the suite (all but the browser test) on the supported extremes:
#   oldest    Python 3.10 + the lower bounds in scripts/oldest-constraints.txt
#   newest    Python 3.13 + the newest releases
#   postgres  Python 3.12 + the newest releases, on PostgreSQL instead of SQLite
#             (connection from PGHOST/PGPORT/PGUSER/PGPASSWORD/PGDATABASE;
#             default postgres@127.0.0.1:5432; the user must be able to create
#             the test database)
# Usage: scripts/matrix.sh [oldest|newest|postgres ...]   (default: all three)
# Each combination gets its own venv under .matrix/. A missing interpreter is
# an error, not a skip: set PY310 / PY312 / PY313 to point at one.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {  # find_python 3.10 -> a path to a working interpreter, or nothing
  local candidate
  for candidate in $(ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python 2>/dev/null | sort -rV) \
                   "$(command -v "python$1" 2>/dev/null)"; do
    # a pyenv shim exists even where that version is not selected: check it runs
    if [[ -n "$candidate" ]] && "$candidate" -c '' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
}

run_combo() {  # run_combo NAME PYTHON [pip args...]
  local name=$1 python=$2; shift 2
  if [[ -z "$python" || ! -x "$python" ]]; then
    echo "matrix $name: interpreter not found (set PY310/PY312/PY313)" >&2
    return 1
  fi
  local venv=".matrix/$name"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "$@" -e ".[test]"
  echo "== matrix $name:"
  "$venv/bin/python" -m pip list 2>/dev/null | grep -iE "^(django|django-redis|redis|hiredis|mmh3|numpy|psycopg|djangorestframework|prometheus.client|django-health-check) "
  "$venv/bin/python" --version
  if [[ "${BLOOM_TEST_DB:-}" == postgresql ]]; then postgres_answers "$venv/bin/python"; fi
  BLOOM_REDIS_SERVERS="${TEST_WORKERS:-2}" ./scripts/with-redis.sh "$venv/bin/python" -m pytest -q -m "not browser" -p no:cacheprovider \
    -n "${TEST_WORKERS:-2}"
}

postgres_answers() {
  "$1" - <<'PY'
import os, sys
import psycopg
try:
    psycopg.connect(
        host=os.environ.get("PGHOST", "127.0.0.1"), port=os.environ.get("PGPORT", "5432"),
        user=os.environ.get("PGUSER", "postgres"), password=os.environ.get("PGPASSWORD", ""),
        dbname=os.environ.get("PGDATABASE", "postgres"), connect_timeout=3,
    ).close()
except psycopg.OperationalError as exc:
    sys.exit(f"matrix postgres: no PostgreSQL to test on ({exc}); set PG* or skip this combination")
PY
}

combos=("$@")
[[ ${#combos[@]} -eq 0 ]] && combos=(oldest newest postgres)
for combo in "${combos[@]}"; do
  case "$combo" in
    oldest) run_combo oldest "${PY310:-$(find_python 3.10)}" -c scripts/oldest-constraints.txt ;;
    newest) run_combo newest "${PY313:-$(find_python 3.13)}" --upgrade ;;
    postgres)
      BLOOM_TEST_DB=postgresql run_combo postgres "${PY312:-$(find_python 3.12)}" \
        --upgrade "psycopg[binary]>=3.1"
      ;;
    *) echo "unknown combination: $combo (oldest|newest|postgres)" >&2; exit 2 ;;
  esac
done
