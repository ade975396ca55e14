"""``make messages`` leaves an unchanged catalogue unchanged, and a changed one in the
order it had (scripts/po_keep_order.py, run by scripts/messages.sh after makemessages)."""

import importlib.util
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PO = ROOT / "django_bloom" / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
SCRIPT = ROOT / "scripts" / "po_keep_order.py"
spec = importlib.util.spec_from_file_location("po_keep_order", SCRIPT)
po = importlib.util.module_from_spec(spec)
spec.loader.exec_module(po)

HEADER = 'msgid ""\nmsgstr ""\n"POT-Creation-Date: {date}\\n"\n'


def catalogue(date: str, *ids: str) -> str:
    blocks = [HEADER.format(date=date)] + [f'msgid "{i}"\nmsgstr "{i.upper()}"\n' for i in ids]
    return "\n".join(blocks)


def test_the_same_entries_in_another_order_leave_the_file_as_it_was():
    old = catalogue("2026-01-01 00:00", "b", "a", "c")
    assert po.keep_order(old, catalogue("2026-02-02 00:00", "a", "b", "c")) == old


def test_kept_entries_stay_put_and_a_new_one_follows_its_neighbour_in_the_source():
    old = catalogue("2026-01-01 00:00", "c", "a", "b")
    new = catalogue("2026-02-02 00:00", "a", "d", "b", "c")  # d: new, after a in the source
    assert po.entries(po.keep_order(old, new)) == po.entries(
        catalogue("2026-02-02 00:00", "c", "a", "d", "b")
    )
    first = catalogue("2026-02-02 00:00", "e", "a", "b", "c")  # a new first entry
    assert [po.key(e) for e in po.entries(po.keep_order(old, first))][1:3] == [
        ('msgid "e"',), ('msgid "c"',)
    ]  # fmt: skip


def test_gettexts_line_wrapping_is_not_a_change():
    old = catalogue("2026-01-01 00:00", "a", "b")
    new = catalogue("2026-02-02 00:00", "a", "b").replace('msgstr "A"', 'msgstr ""\n"A"')
    assert po.keep_order(old, new) == old
    assert po.keep_order(old, new + '\nmsgid "c"\nmsgstr "C"\n').startswith(
        catalogue("2026-02-02 00:00", "a")
    )  # a real change: the new header, the old entries as they were written


def test_a_dropped_entry_goes_and_a_changed_translation_is_taken():
    old = catalogue("2026-01-01 00:00", "b", "a")
    new = catalogue("2026-02-02 00:00", "a").replace('msgstr "A"', 'msgstr "AA"')
    assert po.keep_order(old, new).endswith('msgid "a"\nmsgstr "AA"\n')


def test_the_shipped_catalogue_keeps_its_order_whatever_order_makemessages_gives():
    text = PO.read_text("utf-8")
    header, *rest = po.entries(text)
    random.Random(7).shuffle(rest)
    assert po.keep_order(text, "\n\n".join([header, *rest]) + "\n") == text
    assert len({po.key(entry) for entry in rest}) == len(rest) > 100  # keys name entries
