"""``bloom export``, ``bloom import`` and ``bloom merge``: back up, move and combine filters
(docs/transfer.md; the work is the handle's: ``transfer.py``, ``loading.py``).

``export`` writes to ``PATH.part`` and renames it when done, so a failed export leaves no
file that looks whole; ``-`` streams to stdout (messages then go to stderr). ``import``
reads a file or stdin. Exit codes as elsewhere: 0 done, 2 error (nothing written).
"""

from __future__ import annotations

import contextlib
import os
import sys

from django_bloom.management.cli import Progress, arg, fail, verb
from django_bloom.ops.formatting import human_bytes

KEY_WARNING = (
    "the dump holds the filter's hash key (whoever has it can aim items at its bits): "
    "keep it as private as a database backup, or export --without-key."
)


class TransferVerbs:
    """Mixed into ``bloom``'s Command (uses its say, filter, family_or_filter, options,
    stdout, stderr)."""

    @verb(
        "Write a filter's dump (its row and bits, checksummed) to PATH ('-': stdout).",
        arg("name"),
        arg("path"),
        arg(
            "--without-key",
            action="store_true",
            help="leave the hash key out: the dump then loads only into this same filter",
        ),
        description="Streams the filter's bits range by range (memory stays a few MiB); "
        + KEY_WARNING,
    )
    def cmd_export(self, name, path, without_key, **_):
        f = self.family_or_filter(name, None)  # a family is exported whole
        progress = Progress(self.stderr, f"exporting {name}")
        pieces = f.dump(include_key=not without_key, progress=progress.update)
        if path == "-":
            written = sum(map(getattr(self.stdout, "buffer", self.stdout._out).write, pieces))
        else:
            try:
                with open(path + ".part", "wb") as file:
                    written = sum(map(file.write, pieces))
                os.replace(path + ".part", path)
            except OSError as exc:
                raise fail(f"cannot write {path}: {exc.strerror or exc}") from None
            finally:
                with contextlib.suppress(OSError):
                    os.remove(path + ".part")
        progress.finish(written)
        said = f"Exported {name!r} to {path}: {human_bytes(written)}; " + (
            "without its hash key (it loads only into this filter)." if without_key else KEY_WARNING
        )
        if self.verbosity:
            (self.stderr if path == "-" else self.stdout).write(said)

    @verb(
        "Load a dump from PATH ('-': stdin): replace a filter's bits atomically, or create it.",
        arg("name"),
        arg("path"),
        arg("--cache-alias", default=None, help="where a new filter goes (default: setting)"),
        arg(
            "--trust-callables",
            action="store_true",
            help="a new filter takes the dump's dotted-path normaliser or encoder (code)",
        ),
        description="A filter that exists gets the dump's bits through the rebuild's swap "
        "(adds made meanwhile are kept); one that does not is created from the dump's row. "
        "A dump that is cut short, corrupt or another filter's changes nothing (exit 2).",
    )
    def cmd_import(self, name, path, cache_alias, trust_callables, **_):
        from django_bloom.models import BloomFilter

        existed = BloomFilter.objects.filter(name=name).exists()
        if path == "-":
            stdin = self.options.get("stdin") or sys.stdin
            stream = getattr(stdin, "buffer", stdin)
            f = self.load_dump(name, path, stream, cache_alias, trust_callables)
        else:
            try:
                file = open(path, "rb")  # closed by the with below
            except OSError as exc:
                raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
            with file:
                f = self.load_dump(name, path, file, cache_alias, trust_callables)
        m = f.meta
        made = f"Created ({m.layout}, capacity {m.capacity:,})"
        self.say(f"{'Replaced the bits of' if existed else made} {name!r} from {path}.")

    def load_dump(self, name, path, stream, cache_alias, callables):
        from django_bloom.loading import load_filter

        progress = Progress(self.stderr, f"importing {name}")
        with self.failing(f"cannot import {path} as {name!r}: ", ValueError, TypeError):
            f = load_filter(
                name, stream, cache_alias=cache_alias, progress=progress.update, callables=callables
            )
        progress.finish(progress.total or 0)
        return f

    @verb(
        "OR the bits of SOURCE filters into TARGET (same kind, geometry and hash key).",
        arg("target"),
        arg("sources", nargs="+"),
        description="TARGET then answers 'maybe' for every item of every SOURCE; adds made "
        "meanwhile are kept. Refused, nothing written, for filters made apart (another hash "
        "key: import one's dump to make the other) and kinds that cannot merge.",
    )
    def cmd_merge(self, target, sources, **_):
        f = self.filter(target)
        stats = f.merge(*(self.filter(source) for source in sources))
        self.say(
            f"Merged {', '.join(map(repr, sources))} into {target!r}: about "
            f"{stats.items_added:,} items, {stats.items_added / f.meta.capacity:.0%} of its "
            f"capacity (false-positive rate now {stats.current_fpr:.2%})."
        )
        if stats.capacity_used > 1:
            self.stderr.write(
                f"{target!r} is past its capacity: its false-positive rate is above its target "
                f"{f.meta.error_rate:g}; make a larger filter and add the items again."
            )
