"""Seed the example site: a superuser, a few thousand users, the filters, a blocklist."""

import math
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from django_bloom import ipblock as blocklist
from django_bloom import services
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot
from django_bloom.ops import monitoring
from django_bloom.unique import sync

DEMO_USER, DEMO_PASSWORD = "admin", "bloom-demo"
FIREHOL = Path(__file__).resolve().parents[5] / "shared" / "data" / "firehol_level1.netset"
SAMPLE = Path(__file__).resolve().parents[3] / "sample_blocklist.netset"


class Command(BaseCommand):
    help = "Create the demo superuser, seed users and the blocklist, fill the filters."

    def add_arguments(self, parser):
        parser.add_argument("--users", type=int, default=3000)

    def handle(self, *args, users, **options):
        try:
            self.seed(users)
        except FilterUnavailable as exc:
            location = settings.CACHES["default"]["LOCATION"]
            raise CommandError(
                f"cannot seed the demo filters: Redis at {location} did not answer ({exc}). "
                "Start redis-server, or set REDIS_URL (make demo starts one for you)."
            ) from None

    def seed(self, users):
        started = time.monotonic()
        sync.ensure_bound_filters()  # first: with Redis down, fail before writing any row
        if not User.objects.filter(username=DEMO_USER).exists():
            User.objects.create_superuser(DEMO_USER, "admin@example.com", DEMO_PASSWORD)
        have = User.objects.filter(username__startswith="demo-user-").count()
        if have < users:
            password = make_password(None)  # unusable: seed users cannot log in
            User.objects.bulk_create(
                User(
                    username=f"demo-user-{i}", email=f"demo.user.{i}@example.com", password=password
                )
                for i in range(have, users)
            )
        for name in ("usernames", "emails"):
            count = sync.rebuild_from_source(name)
            self.stdout.write(f"filter {name!r}: rebuilt from {count:,} rows")
        source = FIREHOL if FIREHOL.exists() else SAMPLE
        if not BlockedEntry.objects.exists():
            result = blocklist.import_netset(source, reason=f"demo: {source.name}")
            self.stdout.write(
                f"blocklist: {result.added:,} networks from {source} "
                f"({len(result.errors)} bad lines skipped)"
            )
        else:
            blocklist.rebuild_blocklist()
        self.seed_history()
        self.seed_trends()
        self.stdout.write(f"seeded in {time.monotonic() - started:.1f}s")

    def seed_history(self, name="newsletter-opens", capacity=20_000, days=8):
        """A generic filter filling up over a week, so the admin has a trend to show."""
        if BloomFilter.objects.filter(name=name).exists():
            return
        handle = services.create_filter(
            name, capacity=capacity, description="Demo: a week of growth, for the trend chart."
        )
        now = timezone.now()
        added = 0
        for day in range(days):
            target = int(capacity * 0.11 * (day + 1))  # ~2,200 a day: "filling" on the last
            handle.add_many([f"open-{i}" for i in range(added, target)])
            added = target
            snap = monitoring.record_snapshot(handle)
            recorded = now - timedelta(days=days - 1 - day, hours=3 * (day % 2))
            FilterSnapshot.objects.filter(pk=snap.pk).update(recorded_at=recorded)
        self.stdout.write(f"filter {name!r}: {added:,} items and {days} days of snapshots")

    def seed_trends(self, days=7):
        """A week of daily snapshots for every filter without any (emails, usernames, the
        blocklist): their pages show the capacity chart and its projection at once.

        Only the last point is measured (``record_snapshot``); the earlier ones
        assume steady growth to it, with the bits that many items set.
        """
        now = timezone.now()
        for meta in BloomFilter.objects.filter(family=False).order_by("name"):
            if meta.snapshots.exists():
                continue  # its own history (newsletter-opens), or an earlier run's
            handle = services.get_filter(meta.name)
            stats = handle.stats()
            items = min(stats.estimated_items, float(stats.capacity))  # inf when saturated
            m, k = stats.num_bits, meta.num_hashes
            for day in range(days - 1):
                n = items * (day + 1) / days
                bits = round(m * -math.expm1(-k * n / m))  # expected bits set by n items
                FilterSnapshot.objects.create(
                    bloom_filter=meta,
                    recorded_at=now - timedelta(days=days - 1 - day),
                    bits_set=bits,
                    estimated_items=n,
                    fill_ratio=bits / m,
                    current_fpr=(bits / m) ** k,
                    items_added=round(n),
                    memory_bytes=stats.memory_bytes,
                )
            monitoring.record_snapshot(handle, stats)
            self.stdout.write(f"filter {meta.name!r}: {days} days of snapshots")
