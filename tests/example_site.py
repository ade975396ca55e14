"""Run the example site's manage.py in a subprocess, as `make demo` does."""

import subprocess
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parents[1] / "example_site"


def run_manage(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=SITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
