"""Keep a .po file's order across ``makemessages`` (scripts/messages.sh runs it).

``makemessages`` (msgmerge) writes the entries in the order the source gives them, so an
entry translated by hand where it reads best moved on the next run, and a run over an
unchanged catalogue rewrote it. Here the entries the old file had stay where they were
(as they were written, unless what they say changed: gettext's line wrapping does not
count), a new entry goes after the one the new run puts before it, and a catalogue whose
entries say what they said is written back as it was, header (POT-Creation-Date)
included: a second run changes nothing.

    python scripts/po_keep_order.py OLD.po NEW.po   (rewrites NEW.po)
"""

from __future__ import annotations

import sys
from pathlib import Path


def entries(text: str) -> list[str]:
    """The entries of a .po file (the header first), as blocks of text."""
    return [block.strip("\n") for block in text.strip("\n").split("\n\n") if block.strip()]


def meaning(entry: str) -> tuple[str, ...]:
    """An entry's lines with each string joined (``msgstr ""`` + ``"a"`` + ``"b"`` is
    ``msgstr "ab"``): how gettext wraps it does not matter."""
    lines: list[str] = []
    for line in entry.splitlines():
        bare = line[3:] if line.startswith("#~ ") else line
        if bare.startswith('"') and lines:
            lines[-1] = lines[-1][:-1] + bare[1:]
        else:
            lines.append(line)
    return tuple(lines)


def key(entry: str) -> tuple[str, ...]:
    """What names an entry: its msgctxt and msgid (obsolete ones marked ``#~``)."""
    named = []
    for line in meaning(entry):
        bare = line[3:] if line.startswith("#~ ") else line
        if bare.startswith("msgstr"):
            break
        if bare.startswith(("msgctxt", "msgid")) or named:
            named.append(line)
    return tuple(named)


def keep_order(old: str, new: str) -> str:
    """``new``'s entries in ``old``'s order (see the module's docstring); an entry whose
    meaning did not change keeps its old text (its wrapping)."""
    before, after = entries(old), entries(new)
    if not before or not after:
        return new
    if sorted(map(meaning, before[1:])) == sorted(map(meaning, after[1:])):
        return old  # the same entries: not a byte rewritten
    kept = {meaning(entry): entry for entry in before[1:]}
    fresh = {key(entry): kept.get(meaning(entry), entry) for entry in after[1:]}
    order = [key(entry) for entry in before[1:] if key(entry) in fresh]
    placed = set(order)
    previous = None
    for entry in after[1:]:
        name = key(entry)
        if name not in placed:
            order.insert(order.index(previous) + 1 if previous else 0, name)
            placed.add(name)
        previous = name
    return "\n\n".join([after[0], *(fresh[name] for name in order)]) + "\n"


if __name__ == "__main__":
    old_path, new_path = map(Path, sys.argv[1:3])
    new_path.write_text(keep_order(old_path.read_text("utf-8"), new_path.read_text("utf-8")),
                        "utf-8")  # fmt: skip
