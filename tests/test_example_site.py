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
