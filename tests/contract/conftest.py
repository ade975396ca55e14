"""The contract's machinery: every test with a ``kind`` argument runs once per kind the
registry holds when the tests are collected (``layout_names()``), a kind added by a
plugin or a settings module included; ``@needs(Capability)`` keeps the kinds that have
it, ``@lacks(Capability)`` the others. Nothing here names a kind."""

from __future__ import annotations

import pytest
from django_redis import get_redis_connection

import django_bloom
from django_bloom.engine.kinds import layout_class, layout_names

CAPACITY = 1000  # small: the contract runs every kind, and must stay lean
ERROR_RATE = 0.01


def needs(capability: type):
    """The test runs for the kinds that have ``capability`` (engine/kinds/capabilities.py)."""
    return pytest.mark.kinds_with.with_args(capability)


def lacks(capability: type):
    """The test runs for the kinds that do not have ``capability``."""
    return pytest.mark.kinds_without.with_args(capability)


def applies(markers, kind: type) -> bool:
    """Whether a test with these ``needs``/``lacks`` marks runs for ``kind``."""
    return all(
        issubclass(kind, mark.args[0]) == (mark.name == "kinds_with")
        for mark in markers
        if mark.name in ("kinds_with", "kinds_without")
    )


def pytest_configure(config):
    for name in ("kinds_with", "kinds_without"):
        config.addinivalue_line("markers", f"{name}(capability): contract kinds filter")


def pytest_generate_tests(metafunc):
    if "kind" in metafunc.fixturenames:
        marks = list(metafunc.definition.iter_markers())
        kinds = [name for name in layout_names() if applies(marks, layout_class(name))]
        metafunc.parametrize("kind", kinds or [pytest.param(None, marks=pytest.mark.skip)])


@pytest.fixture
def make(kind, kind_alias, db):
    """``make(name="c", capacity=CAPACITY, **create_filter_kwargs)``: a filter of the kind
    under test, on a server that can hold it."""
    alias = kind_alias(kind)

    def create(name: str = "c", capacity: int = CAPACITY, **kwargs):
        kwargs = {"error_rate": ERROR_RATE, "cache_alias": alias, "layout": kind, **kwargs}
        return django_bloom.create_filter(name, capacity=capacity, **kwargs)

    return create


@pytest.fixture
def keys(kind, kind_alias, bloom_prefix):
    """The Redis client of the kind's server and this test's key pattern: ``keys()`` lists
    the test's keys, ``keys.lose()`` deletes them all (Redis lost its data)."""
    client = get_redis_connection(kind_alias(kind))
    pattern = f"{bloom_prefix}:*"

    class Keys:
        def __call__(self) -> list[bytes]:
            return sorted(client.scan_iter(match=pattern, count=1000))

        def lose(self) -> None:
            found = self()
            assert found, "the filter has keys to lose"
            client.delete(*found)

        def dump(self) -> dict[bytes, bytes]:
            """Every key's serialised value: what a refused write must leave as it was."""
            return {key: client.dump(key) for key in self()}

        def ttls(self) -> list[int]:
            return [client.ttl(key) for key in self()]

        def flush_scripts(self) -> None:
            """SCRIPT FLUSH: the server forgets its Lua scripts (as after a restart)."""
            client.script_flush()

    return Keys()


def items(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]
