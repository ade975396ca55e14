"""The redis-py client behind a Django cache alias: django-redis or Django's own RedisCache.

django-redis (``django_redis.cache.RedisCache``) is the default and documented
backend; Django's built-in ``django.core.cache.backends.redis.RedisCache``
(Django 4.0+) works as well. Either way the engine only needs the client's
``connection_pool``: it makes its own connections from it (connections.py).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django_bloom.exceptions import BloomError

SUPPORTED_BACKENDS = (
    "django_redis.cache.RedisCache",
    "django.core.cache.backends.redis.RedisCache",
)


def backend_classes() -> tuple[type, ...]:
    """The cache classes (and their subclasses) filters can live in."""
    classes: list[type] = []
    try:
        from django_redis.cache import RedisCache as DjangoRedisCache
    except ImportError:  # pragma: no cover - django-redis is a dependency
        pass
    else:
        classes.append(DjangoRedisCache)
    from django.core.cache.backends.redis import RedisCache as BuiltinRedisCache

    classes.append(BuiltinRedisCache)
    return tuple(classes)


# (alias, its CACHES entry) -> (pid, client): one pool per process, as django-redis does.
_builtin_clients: dict[tuple[str, str], tuple[int, Any]] = {}
_lock = threading.Lock()


def _builtin_client(alias: str, cache: Any) -> Any:
    """Django's RedisCache is one instance per thread (or async context), each with its
    own pools: keep the first one's client, so every thread shares one pool. Writes
    (and so the engine's reads) go to the first LOCATION, the primary."""
    from django.conf import settings

    key = (alias, repr(settings.CACHES.get(alias)))
    with _lock:
        entry = _builtin_clients.get(key)
        if entry is None or entry[0] != os.getpid():
            entry = _builtin_clients[key] = (os.getpid(), cache._cache.get_client(None, write=True))
    return entry[1]


def redis_client(alias: str) -> Any:
    """The redis-py client (writes go to the primary) of the cache alias ``alias``.

    Raises BloomError when the alias is neither a django-redis cache nor Django's
    built-in RedisCache.
    """
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache as BuiltinRedisCache

    cache = caches[alias]
    if isinstance(cache, BuiltinRedisCache):
        return _builtin_client(alias, cache)
    if not isinstance(cache, backend_classes()):
        raise BloomError(
            f"cache alias {alias!r} is a {type(cache).__module__}.{type(cache).__qualname__}, "
            f"not a Redis cache: use one of {', '.join(SUPPORTED_BACKENDS)}"
        )
    from django_redis import get_redis_connection

    try:
        return get_redis_connection(alias, write=True)
    except NotImplementedError as exc:
        raise BloomError(f"cache alias {alias!r} is not a django-redis cache: {exc}") from None
