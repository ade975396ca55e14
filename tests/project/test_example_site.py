"""The example site's own commands, run as `make demo` runs them (a subprocess)."""

import os

from tests.example_site import run_manage


def manage(tmp_path, *args, **env):
    environ = {
        **os.environ,
        "EXAMPLE_DB": str(tmp_path / "db.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "example_site.settings",
        **env,
    }
    return run_manage(environ, *args)


def test_seed_demo_with_redis_down_says_so_in_one_line(tmp_path):
    dead = {"REDIS_URL": "redis://127.0.0.1:56379/0"}
    assert manage(tmp_path, "migrate", "--noinput", "-v", "0", **dead).returncode == 0
    done = manage(tmp_path, "seed_demo", "--users", "5", **dead)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Redis at redis://127.0.0.1:56379/0 did not answer" in lines[0]


def test_example_site_sets_its_time_zone(tmp_path):
    done = manage(
        tmp_path,
        "shell",
        "-c",
        "from django.conf import settings; print(settings.TIME_ZONE)",
        DJANGO_TIME_ZONE="Asia/Shanghai",
    )
    assert done.stdout.split()[-1] == "Asia/Shanghai"
    plain = manage(
        tmp_path, "shell", "-c", "from django.conf import settings; print(settings.TIME_ZONE)"
    )
    assert plain.stdout.split()[-1] == "UTC"  # not Django's default America/Chicago


TREND_PAGE = """
import re
from django.test import Client
from django_bloom.models import BloomFilter
client = Client()
assert client.login(username="admin", password="bloom-demo")
for meta in BloomFilter.objects.filter(family=False).order_by("name"):
    page = client.get(f"/admin/django_bloom/bloomfilter/{meta.pk}/change/").content.decode()
    trend = re.search(r"Trend \\((\\d+) snapshots?\\)", page)
    print("PAGE", meta.name, trend and trend[1], page.count('class="bloom-point"'),
          "Projected to reach capacity around" in page)
"""


def test_seed_demo_gives_every_filter_page_a_trend_and_a_projection(tmp_path, redis_client):
    """A newcomer's first filter page shows the chart and when capacity is reached,
    and seeding again adds no second history."""
    prefix = f"test-demo-{os.getpid()}-{tmp_path.name}"
    env = {"BLOOM_KEY_PREFIX": prefix, "REDIS_URL": os.environ.get("REDIS_URL", "")}
    env = {key: value for key, value in env.items() if value}
    try:
        assert manage(tmp_path, "migrate", "--noinput", "-v", "0", **env).returncode == 0
        for _ in range(2):
            seeded = manage(tmp_path, "seed_demo", "--users", "40", **env)
            assert seeded.returncode == 0, seeded.stderr
        shown = manage(tmp_path, "shell", "-c", TREND_PAGE, **env)
        assert shown.returncode == 0, shown.stderr
    finally:
        keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            redis_client.delete(*keys)
    lines = [line.split()[1:] for line in shown.stdout.splitlines() if line.startswith("PAGE ")]
    pages = {words[0]: words[1:] for words in lines}
    assert {"emails", "usernames", "ip-blocklist", "newsletter-opens"} <= set(pages)
    for name, (snapshots, points, projected) in pages.items():
        assert snapshots != "None" and int(snapshots) >= 7, (name, snapshots)
        assert int(points) == int(snapshots), name  # one chart point per snapshot
        assert projected == "True", name
    assert pages["emails"][0] == "7"  # the second seed_demo added none
