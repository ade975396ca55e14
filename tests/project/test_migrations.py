"""Models and migrations never drift."""

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_missing_migrations():
    # Exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "django_bloom", "--check", "--dry-run", verbosity=0)
