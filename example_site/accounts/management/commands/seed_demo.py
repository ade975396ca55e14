"""Seed the example site: a superuser, a few thousand users, the filters, a blocklist."""

import time
from pathlib import Path

from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from django_bloom import blocklist, sync
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import BlockedEntry

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
        self.stdout.write(f"seeded in {time.monotonic() - started:.1f}s")
