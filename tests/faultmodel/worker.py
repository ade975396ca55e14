"""A long-lived process of the fault model: one JSON command a line on stdin, one JSON
reply a line on the original stdout (everything printed goes to stderr).

Role "A" is the application process: it keeps its handles (so they go stale when the
other process resizes, rebuilds or re-creates a filter), its mirrors, one event loop
for the ``a*`` operations, and it forks. Role "B" is "another process": every
operation reads the row afresh (``refresh=True``); it rebuilds, resizes, clears,
deletes and re-creates. A reply is ``{"ok": value}`` or ``{"err": class name,
"applied": bool, "msg": text}``; ``applied`` is True for an error that says the write
reached Redis (``WriteNotReplicated``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import traceback

import django

OPTIONS = {  # what a kind needs: a rotating window of 4 minutes outlives any run (while the
    "rotating": {"slices": 4, "slice_seconds": 60},  # server's clock is stepped by minutes)
    "sharded": {"segments": 3},
}
BLOCKLIST = "fm-blocklist"


class Worker:
    def __init__(self, role: str):
        self.role = role
        self.handles: dict = {}
        self.loop = asyncio.new_event_loop()
        self.rebuilds: dict = {}  # name -> (thread, release event, outcome dict)
        self.mirrored: list[str] = []
        self.override = None

    # -- plumbing --------------------------------------------------------------------
    def handle(self, name: str):
        import django_bloom

        if self.role == "B":
            return django_bloom.get_filter(name, refresh=True)
        if name not in self.handles:
            self.handles[name] = django_bloom.get_filter(name)
        return self.handles[name]

    def configure(self, mirrored: list[str], **more) -> None:
        from django.conf import settings
        from django.test import override_settings

        if self.override is not None:
            self.override.disable()
        self.mirrored = sorted(mirrored)
        config = {**settings.DJANGO_BLOOM, "MIRROR_FILTERS": self.mirrored, **more}
        self.override = override_settings(DJANGO_BLOOM=config)
        self.override.enable()

    # -- the operations ------------------------------------------------------------------
    def op_hello(self):
        from django_bloom.engine.kinds import layout_names, layouts_with
        from django_bloom.engine.kinds.capabilities import Mirrorable, Rebuildable, Removable

        return {
            "kinds": layout_names(),
            "removable": layouts_with(Removable),
            "rebuildable": layouts_with(Rebuildable),
            "mirrorable": layouts_with(Mirrorable),
            "pid": os.getpid(),
        }

    def op_migrate(self):
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def op_create(self, name, kind, capacity):
        import django_bloom

        django_bloom.create_filter(
            name, capacity=capacity, layout=kind, options=OPTIONS.get(kind) or None
        )

    def op_add(self, name, items, mode):
        f = self.handle(name)
        if mode == "single":
            return [each(f.add, item) for item in items]
        if mode == "batch":
            return f.add_many(items)
        if mode == "async-single":
            return self.run_async(*(each_async(f.aadd, item) for item in items))
        return self.loop.run_until_complete(f.aadd_many(items))

    def op_contains(self, name, items, mode):
        """Per item True, False or (single modes) an error reply."""
        f = self.handle(name)
        if mode == "single":
            return [each(f.contains, item) for item in items]
        if mode == "batch":
            return f.contains_many(items)
        if mode == "async-single":
            return self.run_async(*(each_async(f.acontains, item) for item in items))
        return self.loop.run_until_complete(f.acontains_many(items))

    def run_async(self, *coroutines):
        async def sequence():
            return [await c for c in coroutines]

        return self.loop.run_until_complete(sequence())

    def op_threads(self, name, prefix, writers, seconds, handoff, seed):
        """``threads.run``: threads of this process share a handle and its mirror."""
        from tests.faultmodel.threads import run

        return run(self, name, prefix, writers, seconds, handoff, seed)

    def op_block(self, networks):
        """``ipblock.block`` each network (list BLOCKLIST): per network, the entry's network
        or an error reply."""
        from django_bloom import ipblock

        return [each(lambda n: ipblock.block(n, list_name=BLOCKLIST).network, n) for n in networks]

    def op_blocked(self, addresses):
        """Per address: blocked (True / False) or an error reply (``check_ip``)."""
        from django_bloom import ipblock

        return [each(lambda a: ipblock.check_ip(a, list_name=BLOCKLIST).blocked, a)
                for a in addresses]  # fmt: skip

    def op_remove(self, name, items):
        return self.handle(name).remove_many(items)

    def op_cancel(self, name, items, turns):
        """Start ``aadd_many`` as a task, cancel it after ``turns`` loop turns."""
        f = self.handle(name)

        async def cancelled():
            task = asyncio.ensure_future(f.aadd_many(items))
            for _ in range(turns):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return "cancelled"
            return "finished"

        return self.loop.run_until_complete(cancelled())

    def op_fork(self, name, items):
        """A forked child adds ``items`` through the parent's handle; its reply comes back."""
        f = self.handle(name)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read)
            try:
                reply = {"ok": f.add_many(items)}
            except BaseException as exc:  # noqa: BLE001 - reported to the controller
                reply = error_reply(exc)
            os.write(write, json.dumps(reply).encode())
            os._exit(0)
        os.close(write)
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        os.close(read)
        os.waitpid(pid, 0)
        return json.loads(b"".join(chunks) or b'{"err": "ChildDied", "applied": false}')

    def op_refresh(self):
        from django_bloom import services

        services.forget_filters()
        self.handles.clear()

    def op_mirror(self, name, on):
        names = set(self.mirrored)
        (names.add if on else names.discard)(name)
        self.handles.pop(name, None)
        self.configure(sorted(names))

    def op_rebuild_begin(self, name, items, capacity):
        """Start a rebuild (resize with ``capacity``) in a thread; it reads ``items``, then
        waits for ``rebuild_end`` before it replays the journal and swaps."""
        f = self.handle(name)
        release, consumed, outcome = threading.Event(), threading.Event(), {}

        def source():
            yield from items
            consumed.set()
            release.wait(120)

        def run():
            try:
                outcome["ok"] = f.rebuild(source(), capacity=capacity)
            except BaseException as exc:  # noqa: BLE001 - reported at rebuild_end
                outcome.update(error_reply(exc))
            finally:
                consumed.set()
                from django.db import connection

                connection.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        consumed.wait(60)
        self.rebuilds[name] = (thread, release, outcome)
        if "err" in outcome:
            del self.rebuilds[name]
            return outcome
        return {"ok": "started"}

    def op_rebuild_end(self, name):
        thread, release, outcome = self.rebuilds.pop(name)
        release.set()
        thread.join(120)
        return dict(outcome) if outcome else {"err": "RebuildHung", "applied": False}

    def op_clear(self, name):
        self.handle(name).clear()

    def op_recreate(self, name, kind, capacity):
        from django_bloom.exceptions import FilterNotFound

        try:
            self.handle(name).delete()
        except FilterNotFound:
            pass  # an earlier re-create was refused after its delete
        self.op_create(name, kind, capacity)

    def op_check(self, items, mode):
        """``{name: answers or an error reply}`` for ``{name: items}``: one pipe round trip."""
        answers = {}
        for name, wanted in items.items():
            try:
                answers[name] = {"ok": self.op_contains(name, wanted, mode)}
            except Exception as exc:  # noqa: BLE001 - an error is an allowed answer
                answers[name] = error_reply(exc)
        return answers

    def op_probe(self, names, seconds):
        """Until a read of each filter is no longer refused for the connection (a restart, a
        freeze: the breaker reopens within ~1 s); the last error, if any."""
        import time

        from django_bloom.exceptions import RedisRefused, RedisUnreachable

        deadline = time.monotonic() + seconds
        for name in names:
            while True:
                try:
                    self.handle(name).contains("probe")
                    break
                except (RedisUnreachable, RedisRefused) as exc:
                    if time.monotonic() > deadline:
                        return type(exc).__name__
                    time.sleep(0.05)
                except Exception:  # noqa: BLE001 - a missing key is an answer
                    break
        return None

    def op_rebuild_source(self, name):
        from django_bloom.unique.sync import rebuild_from_source

        return rebuild_from_source(name)

    def op_signup(self, email):
        """Whether the row exists afterwards (autocommit: the on-commit add runs at once,
        and a refused add marks the filter stale instead of raising)."""
        from tests.testapp.models import Account

        try:
            Account.objects.create(username=email, email=email)
        finally:
            return Account.objects.filter(email=email).exists()  # noqa: B012

    def op_validate(self, emails):
        """The emails the validator calls unique (it must call none of them unique)."""
        from django.core.exceptions import ValidationError

        from django_bloom.validators import BloomUniqueValidator

        validator = BloomUniqueValidator("account-emails", "testapp.Account", "email")
        unique = []
        for email in emails:
            try:
                validator(email)
            except ValidationError:
                continue
            unique.append(email)
        return unique

    def op_rows(self):
        from django_bloom.models import BloomFilter

        return sorted(BloomFilter.objects.values_list("name", flat=True))


def each(operation, item):
    """One item's answer, or its error reply (the next items still run)."""
    try:
        return operation(item)
    except Exception as exc:  # noqa: BLE001 - reported per item
        return error_reply(exc)


async def each_async(operation, item):
    try:
        return await operation(item)
    except Exception as exc:  # noqa: BLE001 - reported per item
        return error_reply(exc)


def error_reply(exc: BaseException) -> dict:
    from django_bloom.exceptions import WriteNotReplicated

    return {
        "err": type(exc).__name__,
        "applied": isinstance(exc, WriteNotReplicated),
        "msg": str(exc)[:300],
    }


def main() -> None:
    role = sys.argv[1]
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed goes to stderr
    django.setup()
    worker = Worker(role)
    worker.configure([])
    replies.write(json.dumps({"ok": "ready"}) + "\n")
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            result = getattr(worker, f"op_{op}")(**command)
            replied = op in ("fork", "rebuild_begin", "rebuild_end")  # a reply of their own
            reply = result if replied else {"ok": result}
        except BaseException as exc:  # noqa: BLE001 - every error goes to the controller
            reply = error_reply(exc)
            if type(exc).__module__.split(".")[0] not in ("django_bloom", "django"):
                reply["trace"] = traceback.format_exc()[-1500:]
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
