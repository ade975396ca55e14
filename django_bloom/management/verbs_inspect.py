"""``bloom`` verbs that look at filters: stats, verify (and repair), measure."""

from __future__ import annotations

import math
import secrets
from typing import Any

from django_bloom.management.cli import (
    EXIT_ABSENT,
    add_json_option,
    add_member_option,
    arg,
    batches,
    fail,
    positive_int,
    verb,
)
from django_bloom.management.output import (
    breaker_lines,
    details_lines,
    family_lines,
    json_dumps,
    stats_table,
)
from django_bloom.ops import monitoring
from django_bloom.ops.formatting import plain


class InspectVerbs:
    """Mixed into ``bloom``'s Command (uses its say, family_or_filter, member_filter, streams)."""

    @verb(
        "Fill, estimated items and FPR of filters.",
        arg("names", nargs="*", metavar="name"),
        add_json_option,
        arg("--record", action="store_true", help="store a FilterSnapshot (cron)"),
        add_member_option,
    )
    def cmd_stats(self, names, as_json: bool, record: bool, member=None, **_):
        from django_bloom.exceptions import FilterUnavailable
        from django_bloom.family import Family
        from django_bloom.models import BloomFilter

        if member is not None and len(names) != 1:
            raise fail("--member needs exactly one filter family name")

        if names:
            found = set(BloomFilter.objects.filter(name__in=names).values_list("name", flat=True))
            missing = [n for n in names if n not in found]
            if missing:
                raise fail(f"no Bloom filter named {', '.join(map(repr, missing))}")
        else:
            names = list(BloomFilter.objects.order_by("name").values_list("name", flat=True))
        reports, failures, recorded = [], [], 0
        for name in names:
            # An entry (table row and JSON) of a filter, a family member or a whole family.
            f = self.family_or_filter(name, member)
            family = isinstance(f, Family)
            entry: dict[str, Any] = {"name": name, "kind": "family" if family else f.meta.kind}
            if member is not None:
                entry["member"] = member
            try:
                stats = f.stats()
                if record and not family:  # families have no snapshots
                    monitoring.record_snapshot(f, stats)
                    recorded += 1
            except FilterUnavailable as exc:  # Redis did not answer
                entry.update(state="unavailable", error=str(exc), capacity=f.meta.capacity)
                entry["error_rate"] = f.meta.error_rate
            else:
                entry.update({key: plain(value) for key, value in stats.as_dict().items()})
                if family:  # lost: its control key is missing
                    entry["state"] = "ok" if stats.control_present else "lost"
                else:
                    entry["state"] = monitoring.health(stats)
            if entry["state"] in ("unavailable", "lost"):
                failures.append(name)
            reports.append(entry)
        if as_json:
            self.stdout.write(json_dumps(reports))
        elif not reports:
            self.say("No Bloom filters yet. Create one with: manage.py bloom create NAME ...")
        else:
            self.stdout.write(stats_table(reports))
            families = [family_lines(entry) for entry in reports if entry["kind"] == "family"]
            for text in (*families, details_lines(reports), breaker_lines()):
                if text:
                    self.stdout.write(text)
        if record and not as_json:
            self.say(f"Recorded {recorded} snapshot(s).")
        if failures:
            raise fail(f"{len(failures)} filter(s) unavailable: {', '.join(failures)}")

    @verb(
        "Compare a bound filter with its source: exit 1 if Redis lacks bits it needs.",
        arg("name"),
        arg("--repair", action="store_true", help="set the missing bits (only those)"),
        arg("--chunk-bytes", type=positive_int, default=None, help="bytes per GETRANGE (1 MiB)"),
    )
    def cmd_verify(self, name, repair, chunk_bytes, **_):
        from django_bloom.exceptions import OperationNotSupported
        from django_bloom.ops.verify import CHUNK_BYTES, verify_filter

        errors = (ValueError, LookupError, OperationNotSupported)
        with self.failing(f"cannot verify {name!r}: ", *errors):
            report = verify_filter(name, repair=repair, chunk_bytes=chunk_bytes or CHUNK_BYTES)
        if report.compared == "items":
            return self.verified_items(name, report, repair)
        self.say(
            f"{name}: {report.items:,} source items need {report.bits_needed:,} bits; "
            f"Redis lacks {report.bits_missing:,}."
        )
        if report.ok:
            return
        offsets = ", ".join(map(str, report.first_offsets))
        self.stdout.write(
            f"MISSING: {report.bits_missing:,} bits ({report.items_affected:,} items would "
            f"answer 'absent'); first damaged bytes at offsets {offsets}."
        )
        if repair:
            self.stdout.write(f"Repaired: set {report.bits_repaired:,} bits.")
        else:
            self.stdout.write(f"Repair with: manage.py bloom verify {name} --repair")
        raise SystemExit(EXIT_ABSENT)

    def verified_items(self, name, report, repair):
        """``cmd_verify``'s output for a filter verified item by item (layout native)."""
        self.say(
            f"{name}: {report.items:,} source items asked one by one (its bits are "
            f"RedisBloom's); {report.items_affected:,} answer 'absent'."
        )
        if report.ok:
            return
        if repair:
            self.stdout.write(f"MISSING: {report.items_affected:,} items; added them again.")
        else:
            self.stdout.write(
                f"MISSING: {report.items_affected:,} items answer 'absent'. "
                f"Repair with: manage.py bloom verify {name} --repair"
            )
        raise SystemExit(EXIT_ABSENT)

    @verb(
        "Empirical FPR from random probes; writes nothing.",
        arg("name"),
        arg("--probes", type=positive_int, default=100_000),
        add_member_option,
        add_json_option,
    )
    def cmd_measure(self, name, probes, as_json: bool, member=None, **_):
        f = self.member_filter(name, member)
        # A random run id behind a NUL: no real item (form input, e-mail, IP) has this shape.
        run = "\x00bloom-measure:" + secrets.token_hex(16) + ":"
        hits = 0
        made = (f"{run}{i}" for i in range(probes))
        for batch in batches(self.stderr, f"probing {name}", made, probes):
            with self.failing("the filter's encoder refuses text probes: ", ValueError, TypeError):
                hits += f.without_normalizer.contains_many(batch, count=True)  # distinct, as sent
        stats = f.stats()
        measured = hits / probes
        margin = 1.96 * math.sqrt(max(measured * (1 - measured), 1 / probes) / probes)
        report = {
            "name": name,
            "probes": probes,
            "hits": hits,
            "measured_fpr": measured,
            "ci95": [max(0.0, measured - margin), min(1.0, measured + margin)],
            "target_fpr": f.meta.error_rate,
            "fill_estimate_fpr": stats.current_fpr,
            "fill_ratio": stats.fill_ratio,
            "capacity_used": stats.capacity_used,
        }
        if as_json:
            self.stdout.write(json_dumps(report))
            return
        low, high = report["ci95"]
        self.stdout.write(
            f"measured FPR   {measured:.6f}  ({hits:,} of {probes:,} never-added probes; "
            f"95% CI {low:.6f}-{high:.6f})\n"
            f"target FPR     {f.meta.error_rate:.6f}\n"
            f"fill estimate  {stats.current_fpr:.6f}  ({stats.fill_ratio:.1%} of bits set, "
            f"k={f.meta.num_hashes}, {stats.capacity_used:.1%} of capacity)"
        )
