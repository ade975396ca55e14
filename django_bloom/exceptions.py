"""Exceptions raised by django-bloom. All derive from ``BloomError``."""


class BloomError(Exception):
    """Base class for every django-bloom error."""


class FilterNotFound(BloomError, LookupError):
    """No filter with that name exists in the database."""


class FilterExists(BloomError, ValueError):
    """A filter with that name already exists."""


class FilterUnavailable(BloomError):
    """The filter cannot answer right now; never treat this as "absent".

    Raised when Redis is unreachable, or when the filter's key is missing,
    truncated or belongs to another layout (Redis restarted without
    persistence, FLUSHALL, eviction, a resize in flight). Callers fall back to
    the source of truth; ``rebuild`` restores the key.
    """


class FilterKeyMissing(FilterUnavailable):
    """Redis answered, but the filter's key is gone or is not this filter's."""


class RedisUnreachable(FilterUnavailable):
    """Redis did not answer (connection refused, timeout, ...)."""


class FilterIsBound(BloomError):
    """The filter is fed from a source of truth (a model field, BlockedEntry rows).

    Emptying it would make "absent" wrong for every existing row (the validator
    would accept taken values, the middleware let blocked addresses through):
    rebuild it from its source instead.
    """


class OperationNotSupported(BloomError, TypeError):
    """The filter's layout cannot do this (e.g. ``remove`` on a plain Bloom filter)."""


class CircuitOpen(RedisUnreachable):
    """Recent calls to this Redis failed: answered at once, without a network call."""


class WriteNotReplicated(FilterUnavailable):
    """The primary applied the write but fewer than ``WRITE_REPLICAS`` replicas
    acknowledged it in time: a failover now could lose it."""

    replies: object = None  # what the write's replies read: they decide first (a refusal wins)


class RedisRefused(FilterUnavailable):
    """Redis answered but refused the command (full, read-only, loading, busy, ...).

    The filter's bits are intact; writes (and, while loading, reads) fail until
    the server accepts them again.
    """


class RedisFull(RedisRefused):
    """Redis is at ``maxmemory`` under ``noeviction`` and refuses writes (OOM)."""


class RedisReadOnly(RedisRefused):
    """The server is a read-only replica (READONLY): writes go to the primary."""


class RedisLoading(RedisRefused):
    """Redis is loading its dataset from disk (LOADING) and answers nothing yet."""


class FilterFull(BloomError):
    """The filter cannot take the item: a scalable filter has all the sub-filters it may
    have (64, or the next would exceed one Redis string or a sizeable error rate)."""


class ClusterDown(RedisRefused):
    """A Redis Cluster node refused the command: the cluster reports itself down
    (CLUSTERDOWN: a master lost, its slots unserved) or the keys' slot is being
    migrated (TRYAGAIN). Answered at once; the filter's bits are intact."""


class FamilyMisuse(BloomError, ValueError):
    """A filter family was used without a member (``get_filter(name, member=...)``),
    or a member was given for a filter that is not a family."""


class IncompatibleFilters(BloomError, ValueError):
    """Bits that do not mean the same items here: a dump or a filter of another kind,
    geometry, hash key or normaliser (``Filter.load``, ``Filter.merge``). Nothing was written."""


class DumpInvalid(BloomError, ValueError):
    """A dump that is not one, or is truncated or corrupt (a checksum fails): nothing was
    written."""


class NotABlocklist(BloomError, ValueError):
    """A blocklist list name names a filter that is not a blocklist (another kind, a
    family) or a name declared in ``BINDINGS``: blocklist entries never write into nor
    rebuild such a filter (``block``, ``import_netset``, ``rebuild_blocklist``, the admin,
    ``bloom import-blocklist``); nothing is written."""
