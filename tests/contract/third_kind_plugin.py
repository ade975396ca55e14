"""A pytest plugin (``-p tests.contract.third_kind_plugin``): registers the test-only kind of
tests/kinds/test_third_layout.py before the contract is collected, as a project's own
kind registered in its settings or app config would be (test_a_new_kind.py)."""

from django_bloom.engine.kinds import register_layout
from tests.kinds.test_third_layout import DoubleHashingLayout


def pytest_configure(config):
    register_layout(DoubleHashingLayout)
