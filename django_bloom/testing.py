"""Test helpers for sites that use django-bloom: isolated keys, pre-filled filters.

``override_bloom()`` gives the code inside it its own ``KEY_PREFIX``, forgets
cached filter handles on the way in and out, and deletes every key under that
prefix on the way out (even when the test fails)::

    with override_bloom():
        prefill("usernames", ["alice"])
        ...

    @override_bloom()
    def test_signup(): ...

``BloomTestMixin`` does the same around each method of a Django ``TestCase``;
the pytest fixture ``bloom_isolated`` lives in ``django_bloom.pytest_plugin``
(``pytest_plugins = ["django_bloom.pytest_plugin"]`` in your root conftest).

Filter rows live in the database: the test's transaction (``TestCase``,
pytest-django's ``db``) removes them; the keys are what these helpers clean.
"""

from __future__ import annotations

import unittest
import uuid
from collections.abc import Iterable
from contextlib import ContextDecorator
from typing import Any

from django.conf import settings
from django.test import override_settings

from django_bloom.conf import get_config
from django_bloom.exceptions import FilterNotFound
from django_bloom.normalizers import get_normalizer

CHUNK = 5000


def _discard_counts() -> None:
    """A background flush must not recreate deleted keys. (Cached handles are forgotten
    by the DJANGO_BLOOM change itself: ``conf.forget_on_change``.)"""
    from django_bloom import counters

    counters.discard_pending()


class override_bloom(ContextDecorator):  # noqa: N801 - named like override_settings
    """Own KEY_PREFIX inside; its keys deleted on exit.

    ``prefix`` defaults to ``<KEY_PREFIX>-test-<random>``; ``aliases`` are the cache
    aliases to clean (default: the configured ``CACHE_ALIAS``; add any alias a
    filter of the test names with ``cache_alias=``).
    """

    def __init__(self, prefix: str | None = None, aliases: Iterable[str] = ()):
        self._prefix = prefix
        self._aliases = tuple(aliases)
        self.prefix = ""
        self._override: Any = None

    def _recreate_cm(self) -> override_bloom:
        return override_bloom(self._prefix, self._aliases)  # a fresh prefix per decorated call

    def __call__(self, target: Any) -> Any:
        """A function, or a TestCase class as ``@override_settings`` decorates one: each
        test method (its ``setUp`` too) in a fresh copy. Any other class: TypeError."""
        if not isinstance(target, type):
            return super().__call__(target)
        if not issubclass(target, unittest.TestCase):  # wrapped, its tests would never run
            name = target.__qualname__
            raise TypeError(f"@override_bloom() decorates a function or a TestCase, not {name!r}")
        setup = target.setUp

        def setUp(test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
            self._recreate_cm().enter_for(test)
            setup(test)

        target.setUp = setUp  # type: ignore[method-assign]
        return target

    def enter_for(self, test: unittest.TestCase) -> None:
        """Enter for one test method (left by its cleanups); ``test.bloom_prefix``."""
        self.__enter__()
        test.addCleanup(self.__exit__, None, None, None)
        test.bloom_prefix = self.prefix  # type: ignore[attr-defined]

    def __enter__(self) -> override_bloom:
        config = dict(getattr(settings, "DJANGO_BLOOM", None) or {})
        base = config.get("KEY_PREFIX") or get_config()["KEY_PREFIX"]
        self.prefix = self._prefix or f"{base}-test-{uuid.uuid4().hex[:12]}"
        config["KEY_PREFIX"] = self.prefix
        self._override = override_settings(DJANGO_BLOOM=config)
        self._override.enable()
        _discard_counts()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            _discard_counts()
            aliases = {get_config()["CACHE_ALIAS"], *self._aliases}
            for alias in sorted(aliases):
                delete_keys(alias, f"{self.prefix}:*")
        finally:
            self._override.disable()
            _discard_counts()


def delete_keys(alias: str, pattern: str) -> int:
    """Delete the keys matching ``pattern`` on a Redis cache alias; how many."""
    from django_bloom.engine.transport.cache_client import redis_client
    from django_bloom.engine.transport.cluster import cluster_url

    url = cluster_url(alias)
    if url:  # a DJANGO_BLOOM["CLUSTERS"] name: scan every primary, delete slot by slot
        import redis

        client = redis.RedisCluster.from_url(url)
        keys = list(client.scan_iter(match=pattern, count=1000))
        for key in keys:
            client.delete(key)
        client.close()
        return len(keys)
    client = redis_client(alias)
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += client.delete(*batch)
            batch = []
    if batch:
        deleted += client.delete(*batch)
    return deleted


class BloomTestMixin:
    """Django ``TestCase`` mixin: each test method runs inside its own ``override_bloom()``.

    ``self.bloom_prefix`` is that test's prefix. Call ``super().setUp()`` if you
    override ``setUp``.
    """

    bloom_aliases: tuple[str, ...] = ()

    def setUp(self) -> None:
        override_bloom(aliases=self.bloom_aliases).enter_for(self)  # type: ignore[arg-type]
        super().setUp()  # type: ignore[misc]


def prefill(name: str, items: Iterable[Any] = (), **create_kwargs: Any) -> Any:
    """Create the filter ``name`` if needed and add ``items`` (normalised); its handle.

    A missing filter is created from its ``BINDINGS`` entry when it has one and
    no ``create_kwargs`` are given, else with ``create_filter(name, **create_kwargs)``
    (``capacity`` defaults to 1000 or twice the items). Items go through the
    filter's normaliser, as the binding's writes do.
    """
    from django_bloom import create_filter, get_filter
    from django_bloom.unique.sync import ensure_bound_filter

    items = list(items)
    try:
        handle = get_filter(name)
    except FilterNotFound:
        if create_kwargs or not ensure_bound_filter(name):
            create_kwargs.setdefault("capacity", max(1000, 2 * len(items)))
            create_filter(name, **create_kwargs)
        handle = get_filter(name)
    normalize = get_normalizer(handle.meta.normalizer or None)
    values = [normalize(str(item)) for item in items]
    for start in range(0, len(values), CHUNK):
        handle.without_normalizer.add_many(values[start : start + CHUNK])
    return handle
