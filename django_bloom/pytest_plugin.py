"""pytest plugin: ``pytest_plugins = ["django_bloom.pytest_plugin"]`` in your root conftest.

Fixture ``bloom_isolated``: the test runs inside ``override_bloom()`` (its own
key prefix, keys deleted afterwards); the value is the ``override_bloom``
object (``.prefix``). Add ``@pytest.mark.django_db`` or the ``db`` fixture as
usual: filter rows live in the database.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_bloom.testing import override_bloom


@pytest.fixture
def bloom_isolated() -> Iterator[override_bloom]:
    with override_bloom() as bloom:
        yield bloom
