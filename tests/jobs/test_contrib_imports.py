"""The integrations are optional: the app itself never imports DRF, prometheus_client
or django-health-check (only django_bloom.contrib.* does, when a project uses it)."""

import subprocess
import sys

from tests.conftest import ROOT

OPTIONAL = ("rest_framework", "prometheus_client", "health_check")

SCRIPT = f"""
import sys
import django
django.setup()
from django.urls import get_resolver
import django_bloom, django_bloom.admin, django_bloom.middleware, django_bloom.validators
import django_bloom.services, django_bloom.checks, django_bloom.ops.monitoring
get_resolver().url_patterns  # the admin's URLs, loaded
loaded = sorted(name for name in {OPTIONAL!r} if name in sys.modules)
print(",".join(loaded))
"""


def test_the_app_imports_no_optional_integration():
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ""
