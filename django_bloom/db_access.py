"""Database access that holds up on SQLite with writer threads (and so everywhere).

SQLite has one writer at a time and no row locks. Two habits break there under load:

- an open cursor (``.iterator()``) holds the read lock until its last row: every writer
  waits for the whole read, then fails ("database is locked"), and the reader's own
  write (a rebuild's progress) fails at once. ``keyset_pages`` reads a page whole, after
  the last key of the page before, so a writer waits for one page at most;
- a transaction that reads, then writes must upgrade its read lock, which SQLite
  refuses at once while another connection writes (the busy timeout does not apply, it
  would deadlock). ``write_transaction`` takes the write lock first instead, under the busy
  timeout, which orders the transaction with concurrent ones as row locks would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F, QuerySet

from django_bloom.models import BloomFilter

PAGE_ROWS = 20_000  # rows per query of a rebuild's source (fewer queries; ~2 MB of values)


def keyset_pages(
    rows: QuerySet, *fields: str, key: str = "pk", size: int = PAGE_ROWS
) -> Iterator[list[tuple]]:
    """``rows.values_list(key, *fields)`` ordered by ``key``, ``size`` rows a query."""
    page, last = rows.order_by(key).values_list(key, *fields), None
    while chunk := list((page if last is None else page.filter(**{f"{key}__gt": last}))[:size]):
        yield chunk
        last = chunk[-1][0]


@contextmanager
def write_transaction(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """``transaction.atomic(using)`` for a read, then write: on SQLite its first statement
    takes the write lock (a write that changes no row). Other databases lock the rows
    read ``FOR UPDATE``."""
    with transaction.atomic(using=using):
        if connections[using].vendor == "sqlite":
            BloomFilter.objects.db_manager(using).filter(pk=-1).update(name=F("name"))
        yield
