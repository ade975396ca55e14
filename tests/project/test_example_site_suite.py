"""The example site's own tests (example_site/accounts/tests.py) run with the main suite.

They use the example site's settings, so they run in a subprocess, as a site's
CI would run them: ``pytest accounts/tests.py`` from example_site/.
"""

import os
import subprocess
import sys

from tests.example_site import SITE


def test_example_site_tests_pass(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_site.settings",
        "EXAMPLE_DB": str(tmp_path / "db.sqlite3"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "accounts/tests.py"],
        cwd=SITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout
