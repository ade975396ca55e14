"""The check: ``ops.status.filter_report()`` (one query, one Redis pipeline per cache
alias, cached fill figures), turned into django-health-check's errors.

Unavailable (an error): a cache alias's Redis does not answer, a filter's key is
missing (a rebuild is needed), a filter cannot be read. Warning (degraded, still
correct): a filter over capacity (more false positives) or stale (the validator asks
the database until a rebuild). Messages name filters and aliases, never hosts.
"""

from __future__ import annotations

import dataclasses

from health_check.exceptions import ServiceUnavailable, ServiceWarning

from django_bloom.ops import status

try:  # django-health-check 4.x
    from health_check.base import HealthCheck as _Check
except ImportError:  # 3.x
    _Check = None

NAME = "Bloom filters"


def problems() -> tuple[list[str], list[str]]:
    """(errors, warnings) of every filter, as sentences."""
    report = status.filter_report()
    errors: list[str] = []
    warnings: list[str] = []
    for alias, probed in sorted(report.aliases.items()):
        if not probed.up:
            names = [f.name for f in report.filters if f.alias == alias]
            errors.append(
                f"Redis of cache alias {alias!r} does not answer: {len(names)} filter(s) "
                f"unavailable ({', '.join(names)}); the unique validator asks the database, "
                "the blocklist middleware follows FAIL_OPEN"
            )
    for found in report.filters:
        if not report.aliases[found.alias].up:
            continue
        message = _message(found)
        if message and found.state in (status.KEY_MISSING, status.UNAVAILABLE):
            errors.append(message)
        elif message:
            warnings.append(message)
    return errors, warnings


def _message(found: status.FilterStatus) -> str:
    name, meta = found.name, found.meta
    if found.state == status.KEY_MISSING:
        if meta.family:
            return f"filter family {name!r}: its control key is missing (its Redis data is lost)"
        fix = (
            f"rebuild it: manage.py bloom rebuild {name}"
            if meta.is_bound
            else f"recreate it (manage.py bloom clear {name}) and add its items again"
        )
        return f"filter {name!r}: its Redis key is missing, it cannot answer; {fix}"
    if found.state == status.UNAVAILABLE:
        return f"filter {name!r} could not be read from Redis"
    if found.state == status.FULL:
        used = found.stats.capacity_used
        if meta.family:
            return (
                f"filter family {name!r}: its fullest sampled member is at {used:.0%} of its "
                f"capacity {meta.capacity:,}; create a larger family for new members"
            )
        return (
            f"filter {name!r} is full: {used:.0%} of its capacity {meta.capacity:,}, so more "
            f"false positives; rebuild it larger: manage.py bloom rebuild {name} --capacity N"
        )
    if found.state == status.STALE:
        return (
            f"filter {name!r} is stale (it missed a write): the validator asks the database "
            f"until a rebuild: manage.py bloom rebuild {name}"
        )
    return ""


if _Check is not None:

    @dataclasses.dataclass
    class BloomFilters(_Check):
        """django-health-check 4.x: raises with every problem in one message."""

        async def run(self) -> None:
            from asgiref.sync import sync_to_async

            errors, warnings = await sync_to_async(problems, thread_sensitive=True)()
            if errors:
                raise ServiceUnavailable("; ".join(errors + warnings))
            if warnings:
                raise ServiceWarning("; ".join(warnings))

else:
    from health_check import backends as _v3

    # 3.17-3.20: BaseHealthCheckBackend; 3.21+: HealthCheck (the same protocol).
    _Base = getattr(_v3, "BaseHealthCheckBackend", None) or _v3.HealthCheck

    class BloomFilters(_Base):  # type: ignore[no-redef]
        """django-health-check 3.x plugin: one error per problem."""

        def check_status(self) -> None:
            errors, warnings = problems()
            for message in errors:
                self.add_error(ServiceUnavailable(message))
            for message in warnings:
                self.add_error(ServiceWarning(message))

        def __repr__(self) -> str:
            return NAME

        if hasattr(_Base, "identifier"):  # 3.17-3.20 name plugins by it

            def identifier(self) -> str:
                return NAME
