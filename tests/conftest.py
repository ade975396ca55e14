import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.test import override_settings
from django_redis import get_redis_connection
from redis.connection import Connection

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIREHOL = SHARED_DATA / "firehol_level1.netset"


@pytest.fixture
def redis_client():
    return get_redis_connection("default")


@pytest.fixture(autouse=True)
def bloom_prefix(redis_client, settings):
    """Each test writes under its own key prefix and deletes it afterwards."""
    from django_bloom import counters, services

    prefix = f"test-{uuid.uuid4().hex[:12]}"
    config = dict(getattr(settings, "DJANGO_BLOOM", {}))
    config["KEY_PREFIX"] = prefix
    with override_settings(DJANGO_BLOOM=config):
        services.forget_filters()
        yield prefix
    services.forget_filters()
    counters.discard_pending()  # the background flusher must not recreate this test's keys
    keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def firehol_path():
    if not FIREHOL.exists():
        import warnings

        msg = f"DATASET TEST SKIPPED: {FIREHOL} is absent (../shared not beside the project)"
        warnings.warn(msg, stacklevel=1)
        pytest.skip(msg)
    return FIREHOL


@pytest.fixture
def sent_commands(monkeypatch):
    """Every payload redis-py writes to a socket: one entry per round trip."""
    sent = []
    real = Connection.send_packed_command

    def spy(self, command, check_health=True):
        sent.append(b"".join(command) if isinstance(command, (list, tuple)) else command)
        return real(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", spy)
    return sent


@pytest.fixture
def django_process(tmp_path, bloom_prefix):
    """Start ``python -m django ARGS`` as a shell would: a file-backed SQLite DB, this test's
    key prefix. Returns the Popen (stdout/stderr piped, text)."""
    db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(tmp_path / "db.sqlite3"),
        "OPTIONS": {"timeout": 30},  # several processes may write at once
    }
    (tmp_path / "cli_settings.py").write_text(
        "from tests.settings import *  # noqa\n"
        f"DATABASES = {{'default': {db!r}}}\n"
        f"DJANGO_BLOOM = {{'KEY_PREFIX': {bloom_prefix!r}}}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "cli_settings",
    }

    def start(*args):
        return subprocess.Popen(
            [sys.executable, "-m", "django", *args], env=env, cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    return start
