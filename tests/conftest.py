import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from django_redis import get_redis_connection
from redis.connection import Connection

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIREHOL = SHARED_DATA / "firehol_level1.netset"


@pytest.fixture
def redis_client():
    return get_redis_connection("default")


@pytest.fixture(autouse=True)
def bloom_prefix(redis_client, settings):
    """Each test writes under its own key prefix and deletes it afterwards."""
    from django_bloom import services

    prefix = f"test-{uuid.uuid4().hex[:12]}"
    config = dict(getattr(settings, "DJANGO_BLOOM", {}))
    config["KEY_PREFIX"] = prefix
    with override_settings(DJANGO_BLOOM=config):
        services.forget_filters()
        yield prefix
    services.forget_filters()
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


# -- private redis-server processes (full, read-only, replica, ...) --------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caches_with(alias: str, location: str) -> dict:
    return {**settings.CACHES, alias: {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": location}}  # fmt: skip


@pytest.fixture
def private_redis(tmp_path):
    """Start redis-server with extra arguments; yields a factory returning its URL.

    Each server has its own port and directory, no persistence, and is stopped
    by its own PID when the test ends.
    """
    binary = shutil.which("redis-server")
    assert binary, "redis-server must be installed (it runs the shared test Redis too)"
    started = []

    def start(*args: str) -> str:
        port = free_port()
        workdir = tmp_path / f"redis-{port}"
        workdir.mkdir()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        started.append(proc)
        client = redis.Redis(port=port, socket_connect_timeout=0.2)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail(f"redis-server on port {port} did not start")
        return f"redis://127.0.0.1:{port}/0"

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)
