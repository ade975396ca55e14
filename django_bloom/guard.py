"""Cache-penetration guard: answer 404 for keys the filter proves absent.

Requests for slugs or ids that do not exist go to the database on every hit
(there is nothing to cache). With a filter bound to the looked-up field
(``DJANGO_BLOOM["BINDINGS"]``, kept in sync on commit), the guard answers
``Http404`` before the view runs, so before the view's cache or the database::

    @bloom_guard("article-slugs", kwarg="slug")
    def article(request, slug): ...

    class ArticleView(BloomGuardMixin, DetailView):
        bloom_filter = "article-slugs"

    article = get_object_or_404_guarded(Article, "article-slugs", slug=slug)

Only a certain "absent" answers 404. Every doubt runs the normal path: a
maybe (a false positive ends in the view's own 404), the filter missing,
marked stale (it missed a write), or Redis unavailable.

The value is normalised with the filter's normaliser, as the binding does on
writes; a lookup looser than that normaliser (``slug__iexact`` with the
identity normaliser) could match a row the filter does not hold: pick a
normaliser that maps every value the lookup matches to the same string.

A row is in the filter once its creating transaction has committed and its
``on_commit`` add has run; Django runs that add in the committing thread
before ``save()`` (or the outermost ``atomic``) returns, so before the
creating request's response is sent. A request racing that commit by the
microseconds between COMMIT and the add gets the 404 it would have got a
moment earlier; if the add fails the filter is marked stale (normal path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction  # knows markcoroutinefunction
from django.http import Http404
from django.shortcuts import get_object_or_404

from django_bloom.exceptions import FilterNotFound, FilterUnavailable
from django_bloom.normalizers import get_normalizer


def certainly_absent(filter_name: str, value: Any) -> bool:
    """True only when the filter proves no row holds ``value``; any doubt is False."""
    if value is None or value == "":
        return False
    from django_bloom import get_filter

    try:
        handle = get_filter(filter_name)  # metadata cached per process (METADATA_TTL)
        normalized = _normalized(handle, value)
        return normalized is not None and not handle.without_normalizer.contains(normalized)
    except (FilterNotFound, FilterUnavailable, UnicodeError):
        return False


async def acertainly_absent(filter_name: str, value: Any) -> bool:
    """``certainly_absent`` for async views: the filter's round trip is awaited on the
    event loop (``acontains``), no thread; the metadata row, cached per process, is
    read through the async ORM when its cache has expired."""
    if value is None or value == "":
        return False
    from django_bloom import aget_filter

    try:
        handle = await aget_filter(filter_name)
        normalized = _normalized(handle, value)
        raw = handle.without_normalizer
        return normalized is not None and not await raw.acontains(normalized)
    except (FilterNotFound, FilterUnavailable, UnicodeError):
        return False


def _normalized(handle: Any, value: Any) -> str | None:
    """The filter item for ``value``; None when the filter is stale (it missed a write)."""
    meta = handle.meta
    if meta.is_stale:
        return None
    return get_normalizer(meta.normalizer or None)(str(value))


def guard(filter_name: str, value: Any) -> None:
    """Raise ``Http404`` if the filter proves ``value`` absent."""
    if certainly_absent(filter_name, value):
        raise Http404(f"no object matches the given {filter_name!r} key")


async def aguard(filter_name: str, value: Any) -> None:
    """``guard`` for async views: no thread (``acertainly_absent``)."""
    if await acertainly_absent(filter_name, value):
        raise Http404(f"no object matches the given {filter_name!r} key")


def bloom_guard(filter_name: str, kwarg: str = "slug") -> Callable[[Callable], Callable]:
    """Function-view decorator (sync or async views): 404 when the URL kwarg ``kwarg``
    is certainly absent. Put it above ``cache_page`` so an unknown key never reaches
    the cache.
    """

    def decorator(view: Callable) -> Callable:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
                await aguard(filter_name, kwargs.get(kwarg))
                return await view(request, *args, **kwargs)

            return async_wrapper

        @functools.wraps(view)
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
            guard(filter_name, kwargs.get(kwarg))
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


class BloomGuardMixin:
    """Class-based views: 404 in ``dispatch`` when ``kwargs[bloom_kwarg]`` is certainly absent."""

    bloom_filter: str = ""
    bloom_kwarg: str = "slug"

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        value = kwargs.get(self.bloom_kwarg)
        dispatch = super().dispatch  # type: ignore[misc]
        if getattr(self, "view_is_async", False):  # async handlers: dispatch returns a coroutine

            async def guarded() -> Any:
                await aguard(self.bloom_filter, value)
                return await dispatch(request, *args, **kwargs)

            return guarded()
        guard(self.bloom_filter, value)
        return dispatch(request, *args, **kwargs)


def get_object_or_404_guarded(
    klass: Any, filter_name: str, *, guard_on: str | None = None, **lookup: Any
) -> Any:
    """``get_object_or_404(klass, **lookup)``, skipping the query when the filter says absent.

    The guarded value is ``lookup[guard_on]``; ``guard_on`` may be left out when
    there is only one lookup.
    """
    if guard_on is None:
        if len(lookup) != 1:
            raise TypeError("get_object_or_404_guarded: name the guarded lookup with guard_on=")
        (guard_on,) = lookup
    guard(filter_name, lookup[guard_on])
    return get_object_or_404(klass, **lookup)
