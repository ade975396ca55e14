#!/usr/bin/env bash
# Translations of django-bloom (django_bloom/locale/):
#   scripts/messages.sh PY          refresh the .po from the source, compile the .mo
#   scripts/messages.sh PY --check  fail if a marked string is missing from the .po, is
#                                   untranslated or fuzzy, or if the .mo is stale
# Needs GNU gettext (msgfmt, xgettext): apt-get install gettext / brew install gettext.
set -euo pipefail
PY=${1:-python3}
if [[ "$PY" == */* ]]; then PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"; fi
cd "$(dirname "$0")/../django_bloom"
command -v msgfmt >/dev/null || { echo "msgfmt not found: install gettext" >&2; exit 1; }
export DJANGO_SETTINGS_MODULE=tests.settings PYTHONPATH=..
LANGS=(zh_Hans)
PO=locale/zh_Hans/LC_MESSAGES/django.po

if [[ "${2:-}" == "--check" ]]; then
  before=$(mktemp); trap 'rm -f "$before" "$before.mo"' EXIT
  cp "$PO" "$before"
  "$PY" -m django makemessages "${LANGS[@]/#/--locale=}" --no-location -v 0
  if ! diff -u -I '^"POT-Creation-Date' "$before" "$PO"; then
    cp "$before" "$PO"
    echo "django_bloom/locale is out of date: run 'make messages', translate, commit .po and .mo" >&2
    exit 1
  fi
  cp "$before" "$PO"  # leave the checkout unchanged
  stats=$(msgfmt --check --statistics -o "$before.mo" "$PO" 2>&1)
  if grep -qE "untranslated|fuzzy" <<<"$stats"; then
    echo "$PO: $stats" >&2; exit 1
  fi
  "$PY" - "$before.mo" "${PO%.po}.mo" <<'PYCODE'
import gettext, sys
fresh, committed = (gettext.GNUTranslations(open(p, "rb")) for p in sys.argv[1:])
if fresh._catalog != committed._catalog:
    sys.exit("django.mo does not match django.po: run 'make messages' and commit the .mo")
PYCODE
  echo "translations complete: $stats"
  exit 0
fi

"$PY" -m django makemessages "${LANGS[@]/#/--locale=}" --no-location
"$PY" -m django compilemessages
