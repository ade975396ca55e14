#!/usr/bin/env bash
# Translations of django-bloom (django_bloom/locale/):
#   scripts/messages.sh PY          refresh the .po from the source (in the order it has:
#                                   scripts/po_keep_order.py), compile the .mo
#   scripts/messages.sh PY --check  fail if a marked string has no translation (or a fuzzy
#                                   one), the committed .mo lacks it, or a word the admin
#                                   shows does not translate (django_bloom/ops/catalogue.py);
#                                   the checkout is left unchanged
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
  # Order-insensitive: moving a string between files is fine; a new or changed string
  # without a translation, a fuzzy entry, or a .mo that lacks what the .po says is not.
  saved=$(mktemp); trap 'cp "$saved" "$PO"; rm -f "$saved" "$saved.mo"' EXIT
  cp "$PO" "$saved"
  "$PY" -m django makemessages "${LANGS[@]/#/--locale=}" --no-location -v 0
  stats=$(LC_ALL=C msgfmt --check --statistics -o "$saved.mo" "$PO" 2>&1)
  if grep -qE "untranslated|fuzzy" <<<"$stats"; then
    echo "$PO: $stats" >&2
    echo "Run 'make messages', translate the new entries, commit the .po and the .mo." >&2
    exit 1
  fi
  "$PY" - "$saved.mo" "${PO%.po}.mo" <<'PYCODE'
import gettext, sys
fresh, committed = (gettext.GNUTranslations(open(p, "rb"))._catalog for p in sys.argv[1:])
fresh.pop("", None), committed.pop("", None)  # headers (dates) differ
if fresh != committed:
    sys.exit("django.mo does not match the source's strings: run 'make messages', commit the .mo")
PYCODE
  # makemessages finds marked strings only: also every word the admin shows outside its
  # templates (labels, choices, states, layouts' descriptions) must translate.
  "$PY" -m django_bloom.ops.catalogue
  echo "translations complete: $stats"
  exit 0
fi

# makemessages writes the entries in the source's order: put them back in the order the
# .po had (a re-run over an unchanged catalogue leaves it byte for byte as it was).
before=$(mktemp); trap 'rm -f "$before"' EXIT
cp "$PO" "$before"
"$PY" -m django makemessages "${LANGS[@]/#/--locale=}" --no-location
"$PY" ../scripts/po_keep_order.py "$before" "$PO"
"$PY" -m django compilemessages
