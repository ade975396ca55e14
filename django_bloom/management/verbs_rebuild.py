"""``bloom rebuild NAME`` and ``bloom clear NAME``: refill a filter from its source, empty it.

``rebuild`` refills from the bound source (or a blocklist's rows) and swaps the new
bits in atomically, optionally resized; ``clear`` empties a filter (refused for a
bound one: rebuild it instead), asking first unless ``--yes``/``--noinput``. Exit
codes as elsewhere: 0 done, 1 clear cancelled, 2 error.
"""

from __future__ import annotations

import time

from django_bloom.management.cli import (
    Progress,
    add_member_option,
    add_noinput_option,
    arg,
    confirm,
    error_rate,
    fail,
    no_source,
    positive_int,
    verb,
)


class RebuildVerbs:
    """Mixed into ``bloom``'s Command (uses its say, filter, family_or_filter, label,
    rebuild_blocklist, stderr)."""

    @verb(
        "Rebuild a filter from its bound source.",
        arg("name"),
        arg("--capacity", type=positive_int, default=None, help="resize: new n"),
        arg("--error-rate", type=error_rate, default=None, help="resize: new p"),
        description=(
            "Refill a filter from its bound source (app_label.Model.field, or a blocklist's "
            "BlockedEntry rows) and swap it in atomically; also backfills the binding's keys "
            "used by the validator. For a filter declared in DJANGO_BLOOM['BINDINGS'] that "
            "has no row yet, the first rebuild creates it from the declaration."
        ),
    )
    def cmd_rebuild(self, name, capacity, error_rate, **_):
        from django_bloom.models import BloomFilter
        from django_bloom.unique.sync import ensure_bound_filter

        if ensure_bound_filter(name):
            self.say(f"Created filter {name!r} from its BINDINGS declaration.")
        f = self.filter(name)
        resize = {
            key: value
            for key, value in (("capacity", capacity), ("error_rate", error_rate))
            if value is not None
        }
        if f.meta.kind == "blocklist" and not f.meta.source:
            if resize:
                raise fail(
                    "a blocklist filter is sized from its rows; drop --capacity/--error-rate"
                )
            return self.rebuild_blocklist(name)
        if not f.meta.source:
            raise fail(no_source(name, resize))
        from django_bloom.unique.sync import rebuild_from_source

        progress = Progress(self.stderr, f"rebuilding {name}")
        rows = BloomFilter.objects.filter(pk=f.meta.pk)

        def report(done: int) -> None:
            if progress.enabled and progress.total is None:
                # rebuild_from_source has counted the rows and recorded the total.
                progress.total = rows.values_list("rebuild_total", flat=True).first()
            progress.update(done)

        started = time.monotonic()
        with self.failing(f"cannot rebuild {name!r}: ", ValueError, LookupError):
            count = rebuild_from_source(name, progress=report, **resize)
        progress.finish(count)
        meta = self.filter(name).meta
        self.say(
            f"Rebuilt {name!r} from {meta.source}: {count:,} items in "
            f"{time.monotonic() - started:.1f}s (capacity {meta.capacity:,}, "
            f"error rate {meta.error_rate:g})."
        )

    @verb(
        "Empty a filter (refused for bound filters: rebuild them instead).",
        arg("name"),
        arg("--yes", action="store_true", help="do not ask for confirmation"),
        add_member_option,
        add_noinput_option,
    )
    def cmd_clear(self, name, yes, interactive, member=None, **_):
        from django_bloom.family import Family
        from django_bloom.registry import refuse_clear

        f = self.family_or_filter(name, member)
        is_family = isinstance(f, Family)
        refuse_clear(f.meta)  # a bound filter: exit 2, suggests `bloom rebuild NAME`
        what = (
            f"every member of filter family {name!r}"
            if is_family
            else f"every item of Bloom filter {self.label(name, member)}"
        )
        if not yes and interactive:
            confirm(
                f"Clear {what}? Type 'yes' to continue: ",
                "Cancelled: nothing was cleared.",
                accepts=lambda answer: answer.lower() in ("yes", "y"),
            )
        removed = f.clear()
        if is_family:
            self.say(f"Cleared family {name!r}: {removed:,} member key(s) removed.")
            return
        self.say(f"Cleared {self.label(name, member)}.")
