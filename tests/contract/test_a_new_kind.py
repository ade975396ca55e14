"""A kind added to the registry, with no test of its own, runs through the whole contract:
the test-only kind of tests/kinds/test_third_layout.py, registered by a plugin in another
pytest process, is collected by every contract test that applies to its capabilities
(Rebuildable, Mirrorable, Planned) and passes them all."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.contract import test_capabilities, test_promises
from tests.contract.conftest import applies
from tests.kinds.test_third_layout import DoubleHashingLayout

ROOT = Path(__file__).resolve().parents[2]


def contract_tests_for(kind: type) -> set[str]:
    """The contract's tests (function names) that run for ``kind``."""
    return {
        name
        for module in (test_promises, test_capabilities)
        for name, test in inspect.getmembers(module, inspect.isfunction)
        if name.startswith("test_") and "kind" in inspect.signature(test).parameters
        and applies(getattr(test, "pytestmark", []), kind)
    }  # fmt: skip


@pytest.mark.django_db
def test_a_kind_registered_with_no_tests_of_its_own_passes_the_whole_contract():
    # This process holds its test database open, as it does whenever a test before this one
    # left a connection: the inner pytest must make a database of its own, not drop ours
    # (on PostgreSQL it could not, and exited with 2).
    connection.ensure_connection()
    expected = contract_tests_for(DoubleHashingLayout)
    assert {"test_a_rebuild_and_a_resize_keep_every_item", "test_a_mirror_answers_as_redis_does",
            "test_remove_is_refused_and_the_item_stays"} <= expected  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/contract/test_promises.py",
         "tests/contract/test_capabilities.py", "-p", "tests.contract.third_kind_plugin",
         "-p", "no:cacheprovider", "--nomigrations", "-q", "-rA", "-k", "test-double"],
        cwd=ROOT, env={**os.environ, "BLOOM_TEST_DB_NAME": "test_bloom_new_kind"},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    passed = re.findall(r"^PASSED \S+::(\w+)\[test-double[\]-]", run.stdout, re.M)
    assert set(passed) == expected
    assert len(passed) >= len(expected) + 6  # the bad items and creates: one test per case
