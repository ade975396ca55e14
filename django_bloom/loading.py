"""``load_filter``: a dump loaded as filter ``name``, made from the dump's row when no
filter has that name (``bloom import``). Export, replace and merge: ``transfer.py``."""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import IntegrityError, transaction

from django_bloom.conf import get_config
from django_bloom.engine import hashers, sizing
from django_bloom.engine.kinds import layout_class
from django_bloom.engine.kinds.base import check_options_shape
from django_bloom.exceptions import (
    BloomError,
    DumpInvalid,
    FilterExists,
    FilterNotFound,
    IncompatibleFilters,
)
from django_bloom.family import Family
from django_bloom.filter import Filter
from django_bloom.models import BloomFilter
from django_bloom.registry import check_size, forget_filters, new_generation
from django_bloom.services import (
    encoder_path,
    get_handle,
    validate_alias,
    validate_binding,
    validate_family,
    validate_name,
    validate_server,
)
from django_bloom.transfer import ROW, reader_of


def load_filter(
    name: str,
    source: Any,
    *,
    cache_alias: str | None = None,
    progress: Any = None,
    callables: bool = False,
) -> Filter | Family:
    """Load a dump (a binary file, bytes) as filter ``name``: into the filter of that name
    if there is one (``Filter.load``: its bits replaced atomically), else as a new filter
    made from the dump's row on ``cache_alias`` (default: the setting). A new filter's keys
    are written before its row, so it never exists half-loaded. A dump is data: a new
    filter takes a dotted-path normaliser or encoder from it (code every item goes through)
    only with ``callables=True``. Returns its handle."""
    validate_name(name)
    reader = reader_of(source, progress)
    try:
        handle = get_handle(name, refresh=True)
    except FilterNotFound:
        alias = cache_alias or get_config()["CACHE_ALIAS"]
        return _create(name, reader, alias, callables)
    handle.load(reader)
    return get_handle(name, refresh=True)


def _create(name: str, reader: Any, alias: str, callables: bool) -> Filter | Family:
    header = reader.header
    if header.get("seed") is None:
        raise IncompatibleFilters(
            f"the dump of {header.get('name')!r} leaves its hash key out: it loads only into "
            f"that filter's row, and there is no filter {name!r}"
        )
    try:
        fields = {field: header[field] for field in ROW}
        meta = BloomFilter(name=name, cache_alias=alias, seed=header["seed"], **fields)
        meta.hasher, meta.generation = header["hasher"], new_generation()
    except (KeyError, TypeError) as exc:
        raise DumpInvalid(f"the dump's header lacks {exc}") from None
    named = [path for path in (meta.normalizer, meta.encoder) if "." in path]
    if named and not callables:
        raise IncompatibleFilters(
            f"the dump names code every item would go through ({', '.join(named)}): taken "
            "only on trust, load_filter(..., callables=True) or bloom import --trust-callables"
        )
    _validate(meta, header)
    handle = Family(meta) if meta.family else Filter(meta)
    try:
        handle.write_dump(reader)
        with transaction.atomic():
            meta.save()
    except IntegrityError:  # another process made the name meanwhile: its keys stay
        raise FilterExists(f"a Bloom filter named {name!r} already exists") from None
    except BaseException:
        with contextlib.suppress(BloomError):
            handle.delete()  # its keys (no row was saved)
        raise
    forget_filters(name)
    return handle


def _validate(meta: BloomFilter, header: dict[str, Any]) -> None:
    """What ``create_filter`` checks of a new row, and the geometry the dump's bits have."""
    sizing.validate_sizing(meta.capacity, meta.error_rate)
    if meta.kind not in BloomFilter.Kind.values:
        raise DumpInvalid(f"the dump's kind {meta.kind!r} is not one of this release's")
    layout_class(meta.layout).validate_options(check_options_shape(meta.options))
    validate_family(meta.family, meta.member_ttl, meta.layout, meta.kind, meta.source)
    validate_alias(meta.cache_alias, meta.layout, meta.family)
    validate_server(meta.layout, meta.cache_alias)
    encoder_path(meta.encoder)
    hashers.identify_hasher(meta.hasher, meta.seed)
    meta.derive_geometry()
    if (meta.num_bits, meta.num_hashes) != (header["num_bits"], header["num_hashes"]):
        raise IncompatibleFilters(
            f"the dump's geometry (m={header['num_bits']}, k={header['num_hashes']}) is not "
            f"what this release makes of its capacity and error rate (m={meta.num_bits}, "
            f"k={meta.num_hashes})"
        )
    check_size(meta)
    validate_binding(meta.layout, meta.is_bound, meta.bound_source)
    if BloomFilter.objects.filter(name=meta.name).exists():
        raise FilterExists(f"a Bloom filter named {meta.name!r} already exists")
