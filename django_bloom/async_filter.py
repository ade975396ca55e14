"""The async API of a filter handle: ``await f.acontains(x)``, ``aadd`` ... (a mixin of ``Filter``).

Made for async views and ASGI servers: an operation does not hold a thread.
It hashes in the event loop's thread (microseconds, as the sync path does),
builds its layout's plan (engine/plans.py: the same bytes as the sync path)
and runs it on the asyncio transport (engine/transport/aio.py): one round
trip, the same 0.2 s timeouts, the same circuit breaker and error mapping.

What still uses a worker thread, all of it rare or opt-in:

- re-reading the row after ``FilterKeyMissing`` (resize, rebuild): an async
  ORM query (``aget``), then the operation is retried once, as in sync;
- a local mirror (``MIRROR_FILTERS``) answers in the loop while its copy is
  fresh (checked within ``MIRROR_REFRESH_SECONDS``, and no invalidation message
  since, as for sync reads); its re-check (one small read) runs in a worker thread;
- a write that lands while a rebuild runs journals its items in a worker thread;
- a kind that is not ``Planned`` (engine/kinds/capabilities.py), ``remove``, and a
  cache alias whose connection class has no asyncio twin (Sentinel, custom
  classes): the sync call runs in a worker thread
  (``sync_to_async(thread_sensitive=False)``), as a whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError

from django_bloom.engine import hashing
from django_bloom.engine.kinds.capabilities import Planned
from django_bloom.exceptions import FilterKeyMissing
from django_bloom.models import BloomFilter


def _in_thread(func: Callable, *args: Any) -> Any:
    """``func(*args)`` in a worker thread (not the one shared sync thread)."""
    return sync_to_async(func, thread_sensitive=False)(*args)


class AsyncAccess:
    """The private ``_a*`` operations that the public ``acontains`` ... run (written once
    in ``normalizing.py``). Needs ``Filter``'s ``_bound``, ``storage``, ``meta``,
    ``_mirror``, ``_digest*``, ``_journal``, ``_may_refresh``, ``_rebind_if_moved`` and
    the sync operations."""

    @property
    def _aio(self) -> Any:
        """This handle's asyncio transport (imported on first use: sync-only processes
        never load redis.asyncio)."""
        conn = self.__dict__.get("_aio_conn")
        if conn is None:
            from django_bloom.engine.transport.aio import AsyncEngineConnection

            conn = self.__dict__["_aio_conn"] = AsyncEngineConnection(self.storage.alias)
        return conn

    # -- queries --------------------------------------------------------------
    async def _acontains(self, item: Any, bound: Any) -> bool:
        local = self._mirror(bound)
        if local is not None:
            copy = local.current()
            if copy is not None:
                return local.probe(*hashing.PAIR.unpack(self._digest(item)), copy)
            return await _in_thread(self._contains, item, bound)
        _digest, flat = self._digest_one(item, bound)
        plan = bound.layout.contains_plan(flat) if isinstance(bound.layout, Planned) else None
        if plan is None or not self._aio.available():
            return (await _in_thread(bound.layout.contains, self.storage, flat))[0]
        return (await self._aio.run(plan))[0]

    async def _acontains_many(self, items: Sequence[Any], bound: Any) -> list[bool]:
        digests, flat = self._digest_many(items, bound)
        if not digests:
            return []
        local = self._mirror(bound)
        if local is not None:
            copy = local.current()
            if copy is None:
                return await _in_thread(local.test, flat, bound.meta.num_hashes)
            return local.test(flat, bound.meta.num_hashes, copy)
        plan = bound.layout.contains_plan(flat) if isinstance(bound.layout, Planned) else None
        if plan is None or not self._aio.available():
            return await _in_thread(bound.layout.contains, self.storage, flat)
        return await self._aio.run(plan)

    # -- writes -------------------------------------------------------------
    async def _aadd(self, item: Any, bound: Any) -> bool:
        return (await self._awrite(bound, *self._digest_one(item, bound)))[0]

    async def _aadd_many(self, items: Sequence[Any], bound: Any) -> list[bool]:
        digests, flat = self._digest_many(items, bound)
        if not digests:
            return []
        return await self._awrite(bound, digests, flat)

    async def _awrite(self, bound: Any, digests: bytes, flat: Sequence[int]) -> list[bool]:
        """``Filter._write`` with the round trip awaited (a shortfall raised last, as there)."""
        plan = bound.layout.add_plan(flat) if isinstance(bound.layout, Planned) else None
        if plan is None or not self._aio.available():
            result = await _in_thread(bound.layout.add, self.storage, flat)
        else:
            result = await self._aio.run(plan)
        local = self._mirror(bound)
        if local is not None:
            local.apply(flat)
        if result.rebuilding:  # rare; may read the row (ORM): Django's thread-sensitive path
            await sync_to_async(self._journal)(bound, digests)
        self._counted(bound, result.was_new.count(True))
        return result.reported()

    async def _aremove(self, items: Sequence[Any], bound: Any) -> list[bool]:
        return await _in_thread(self._remove, items, bound)  # counting scripts: no plans

    # -- a moved key: re-read the row, retry once -----------------------------
    async def _aretrying(self, operation: Callable[[Any, Any], Any], arg: Any) -> Any:
        """``Filter._retrying`` for coroutines."""
        try:
            return await operation(arg, self._bound)
        except FilterKeyMissing:
            if not await self._arefresh():
                raise
        return await operation(arg, self._bound)

    async def _arefresh(self) -> bool:
        """``Filter._refresh`` with the row read through the async ORM."""
        if not self._may_refresh():
            return False
        try:
            meta = await BloomFilter.objects.aget(pk=self.meta.pk)
        except (BloomFilter.DoesNotExist, DatabaseError):
            return False
        return self._rebind_if_moved(meta)
