"""The blocklist's signals, for alerts and audit logs (docs/blocklist.md has a receiver).

- ``request_blocked(sender, request, entry, reason)``: the middleware refused a request
  (``sender``: the middleware's class). ``reason`` is ``"listed"`` (a 403; ``entry`` is
  the ``BlockedEntry``) or ``"unavailable"`` (a 503 under ``FAIL_OPEN=False``; no entry).
- ``entry_blocked(sender, entry, created)``: ``block()``, an import (each new entry) or
  the admin listed a network, once its transaction has committed.
- ``entry_unblocked(sender, entry)``: ``unblock()`` deleted the entry, or the admin's
  "Expire now" expired it, once committed.

Receivers run robustly (``send_robust``): one that raises is logged by Django
(``django.dispatch``, ERROR) and changes nothing: a refusal stays a refusal, a write stays
written.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

request_blocked = Signal()
entry_blocked = Signal()
entry_unblocked = Signal()


async def asend_robust(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """``signal.send_robust`` from async code (async receivers awaited, sync ones in a
    thread, as Django 5.0's ``asend_robust`` does)."""
    if hasattr(signal, "asend_robust"):
        await signal.asend_robust(sender, **kwargs)
    elif signal.has_listeners(sender):  # pragma: no cover - Django 4.2
        from asgiref.sync import sync_to_async

        await sync_to_async(signal.send_robust)(sender, **kwargs)
