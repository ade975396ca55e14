"""Running the fault model: a run executes steps (drawn from a seed, or a list to
replay) on fresh workers, checking the invariants after each; a failing list is
shrunk by delta debugging to the shortest list that still fails the same way."""

from __future__ import annotations

import random
import time
from collections import Counter

import redis

from django_bloom.engine.transport import connections
from tests.faultmodel.extra_steps import ExtraSteps
from tests.faultmodel.model import (
    BLOCKLIST,
    BOUND,
    State,
    Tracked,
    Violation,
    absence,
    absent_items,
    run_kinds,
)
from tests.faultmodel.rig import Rig

SETUP_CAPACITY = 2000
UNREACHABLE = ("RedisUnreachable", "CircuitOpen", "LoopTooBusy")
# How long drop_clients lets the workers sit idle first (the code of issue 28 had no
# IDLE_CHECK_SECONDS: the model runs on it too, docs/reliability.md).
IDLE_SECONDS = getattr(connections, "IDLE_CHECK_SECONDS", 0.01) * 5


class Run(ExtraSteps):
    """One run: fresh workers and prefix, a filter of each of ``kinds`` (default: every
    registered kind), the bound filter, then steps."""

    def __init__(self, rig: Rig, kinds: list[str] | None = None):
        self.rig = rig
        self.state = State(rig.capabilities)
        self.prefix, self.a, self.b = rig.workers()
        self.steps: list[dict] = []
        self.violations: list[tuple[int, Violation]] = []
        self.exempt: set[str] = set()  # orphans already reported
        for kind in kinds or self.state.caps["kinds"]:
            name = f"f-{kind}"
            reply = self.b.call("create", name=name, kind=kind, capacity=SETUP_CAPACITY)
            assert "err" not in reply, f"setup: create {name}: {reply}"
            self.state.filters[name] = Tracked(name, kind, SETUP_CAPACITY)
        reply = self.b.call("rebuild_source", name=BOUND)
        assert "err" not in reply, f"setup: rebuild_source: {reply}"
        self.state.filters[BOUND] = Tracked(BOUND, "standard", 20_000)
        # The blocklist, with one /28 listed (every later entry is a /28 too: a process
        # learns a new prefix length only within PREFIX_LENGTHS_TTL).
        self.state.filters[BLOCKLIST] = Tracked(BLOCKLIST, "blocklist", 20_000)
        self.do_block({"op": "block", "networks": ["100.64.255.0/28"]}, None, index=-1)

    def close(self) -> None:
        for worker in (self.a, self.b):
            worker.stop()

    # -- one step ----------------------------------------------------------------------
    def execute(self, step: dict) -> None:
        self.steps.append(step)
        self.index = len(self.steps) - 1
        handler = getattr(self, f"do_{step['op']}")
        f = self.state.filters.get(step.get("name", ""))
        if "name" in step and f is None and step["op"] != "create":
            return  # the filter's create was dropped while shrinking
        handler(step, f)
        for _ in range(5):  # after a violation: forgive it, check again for others
            try:
                self.check(step)
                break
            except Violation as violation:
                self.violations.append((self.index, violation))
                violation.forgive()
        self.remember()

    def do_add(self, step, f):
        reply = self.a.call("add", name=f.name, items=step["items"], mode=step["mode"])
        self.state.acknowledged(f, step, self.index, reply)
        return reply

    def do_b_add(self, step, f):
        reply = self.b.call("add", name=f.name, items=step["items"], mode=step["mode"])
        self.state.acknowledged(f, step, self.index, reply)

    def do_fork(self, step, f):
        reply = self.a.call("fork", name=f.name, items=step["items"])
        self.state.acknowledged(f, step, self.index, reply)

    def do_cancel(self, step, f):
        self.a.call("cancel", name=f.name, items=step["items"], turns=step["turns"])
        # a cancelled add may or may not have been applied: nothing owed

    def do_remove(self, step, f):
        owed = f.owed()
        if f.kind not in self.state.caps["removable"] or f.rebuild or not owed:
            return
        items = sorted({owed[int(p * len(owed))] for p in step["picks"]})
        self.a.call("remove", name=f.name, items=items)
        f.expected.subtract(items)  # returned or not: the remove may have been applied

    def do_rebuild_begin(self, step, f):
        if f.kind not in self.state.caps["rebuildable"] or f.rebuild or f.name == BOUND:
            return
        items = f.owed()
        reply = self.b.call("rebuild_begin", name=f.name, items=items, capacity=step["capacity"])
        if "err" not in reply:
            f.rebuild = {"items": items, "begin": Counter(f.expected), "tainted": False,
                         "capacity": step["capacity"]}  # fmt: skip

    def do_rebuild_end(self, step, f):
        if not f.rebuild:
            return
        reply = self.b.call("rebuild_end", name=f.name)
        rebuild, f.rebuild = f.rebuild, None
        f.epoch += 1
        if rebuild["tainted"]:
            f.expected = Counter()
        elif "err" not in reply:  # the new key: the items read, plus what was added since
            since = f.expected - rebuild["begin"]
            f.expected = Counter(rebuild["items"]) + since
            f.capacity = rebuild["capacity"] or f.capacity

    def do_clear(self, step, f):
        if f.rebuild or f.name == BOUND:
            return
        self.b.call("clear", name=f.name)
        f.expected, f.epoch = Counter(), f.epoch + 1

    def do_recreate(self, step, f):
        if f.rebuild or f.name == BOUND:
            return
        reply = self.b.call("recreate", name=f.name, kind=step["kind"], capacity=step["capacity"])
        f.expected, f.epoch, f.generation = Counter(), f.epoch + 1, f.generation + 1
        f.gone = "err" in reply
        if not f.gone:
            f.capacity = step["capacity"]

    def do_create(self, step, f):
        name = step["name"]
        if name in self.state.filters:
            return
        reply = self.b.call("create", name=name, kind=step["kind"], capacity=step["capacity"])
        if "err" not in reply:
            self.state.filters[name] = Tracked(name, step["kind"], step["capacity"])

    def do_refresh(self, step, f):
        self.a.call("refresh")

    def do_mirror(self, step, f):
        self.a.call("mirror", name=f.name, on=step["on"])
        (self.state.mirrored.add if step["on"] else self.state.mirrored.discard)(f.name)

    def do_signup(self, step, f):
        reply = self.a.call("signup", email=step["email"])
        if reply.get("ok"):  # the row exists
            self.state.committed.add(step["email"])
            self.state.protected.add(step["email"])

    def do_rebuild_source(self, step, f):
        if "err" not in self.b.call("rebuild_source", name=BOUND):
            self.state.protected = set(self.state.committed)

    # -- faults -------------------------------------------------------------------------
    def do_pause(self, step, f):
        self.rig.servers.pause_replica()
        self.state.paused = True

    def do_resume(self, step, f):
        self.rig.servers.resume_replica()
        self.state.paused = False

    def do_freeze(self, step, f):
        """The primary frozen (SIGSTOP) past the socket timeout while A adds; then thawed."""
        primary = self.rig.servers.primary
        primary.pause()
        try:
            self.a.call("add", name=f.name, items=step["items"], mode=step["mode"])
        finally:
            primary.resume()
        self.recover()  # what the frozen add did is unknown: nothing owed

    def do_flushall(self, step, f):
        self.rig.servers.client().flushall()
        for tracked in self.state.filters.values():
            if tracked.rebuild:
                tracked.rebuild["tainted"] = True

    def do_fill(self, step, f):
        self.rig.servers.fill_up()
        self.state.full = True

    def do_unbound(self, step, f):
        self.rig.servers.unbound()
        self.state.full = False

    def do_restore(self, step, f):
        """``RESTORE ... REPLACE`` of the filter's keys as DUMPed ``back`` steps ago. With
        ``replay``, B then makes as many new single writes as the RESTORE undid, so the
        write counter is where it was (a failover to a replica k writes behind, and k
        new writes after it: what a version that is only a counter cannot tell apart)."""
        if len(f.snapshots) <= step["back"] or f.rebuild or self.state.full:
            return  # (a full Redis would refuse the RESTORE)
        epoch, dumps, expected = f.snapshots[-1 - step["back"]]
        if epoch != f.epoch:
            return  # rebuilt, cleared or re-created since: not "an older copy of this key"
        keys = f"{self.prefix}:{{{f.name}}}:*"
        before = self.rig.servers.write_counter(keys)
        self.rig.servers.restore(dumps)
        f.expected = Counter(expected)
        f.revived = f.revived or f.gone
        undone = before - self.rig.servers.write_counter(keys) if step.get("replay") else 0
        for j in range(min(undone, 8)):
            replayed = {"op": "restore", "items": [f"s{self.index}-{1000 + j}"]}
            reply = self.b.call("add", name=f.name, items=replayed["items"], mode="single")
            self.state.acknowledged(f, replayed, self.index, reply)

    def do_drop_clients(self, step, f):
        """Redis closes every client connection while the workers sit idle (its idle
        ``timeout``, a restart on the same address); then A adds. Redis is up: no call
        may fail for a connection Redis closed before the call began. Idle means idle:
        Redis's ``timeout`` is whole seconds and a restart takes longer than
        ``IDLE_CHECK_SECONDS`` (a connection used within it is not looked at)."""
        time.sleep(IDLE_SECONDS)
        self.rig.servers.drop_clients()
        reply = self.do_add(step, f)
        replies = reply["ok"] if isinstance(reply.get("ok"), list) else [reply]
        failed = [r for r in replies if isinstance(r, dict) and r.get("err") in UNREACHABLE]
        if failed:
            self.violations.append((self.index, Violation(
                "unreachable", f"A's add after Redis closed its idle connections: {failed[0]}"
            )))  # fmt: skip

    def remember(self) -> None:
        """After each step: every filter's keys DUMPed (the last 4 kept), for ``restore``."""
        for f in self.state.filters.values():
            if f.name == BOUND or f.rebuild:
                f.snapshots.clear()
                continue
            try:
                dumps = self.rig.servers.dump(f"{self.prefix}:{{{f.name}}}:*")
            except redis.RedisError:
                f.snapshots.clear()
                continue
            f.snapshots = [*f.snapshots[-3:], (f.epoch, dumps, Counter(f.expected))]

    def do_save_rdb(self, step, f):
        saved = {t.name: (t.epoch, Counter(t.expected))
                 for t in self.state.filters.values() if not t.rebuild}  # fmt: skip
        path = self.rig.servers.save("older")
        self.state.rdb = (path, saved, set(self.state.protected))
        self.rdb_generations = {t.name: t.generation for t in self.state.filters.values()}

    def do_rewind(self, step, f):
        if not self.state.rdb:
            return
        then = getattr(self, "rdb_generations", {})
        older = [f.name for f in self.state.filters.values()
                 if f.name in then and then[f.name] != f.generation]  # fmt: skip
        self.rig.servers.rewind(self.state.rdb[0], step["how"])
        if older:
            # The RDB brings back a generation that a re-create retired: a handle A cached
            # before the re-create reads it (its key exists again) until the handle's row
            # is re-read, METADATA_TTL at most (docs/guarantees.md, "What is not promised").
            # The model lets that window pass: A re-reads its rows.
            self.a.call("refresh")
        self.state.full = False
        self.state.rewound()
        self.recover()

    def recover(self) -> None:
        names = [n for n in self.state.filters if n != BOUND][:2]
        for worker in (self.a, self.b):
            worker.call("probe", names=names, seconds=15)

    # -- the invariants --------------------------------------------------------------------
    def check(self, step: dict) -> None:
        state = self.state
        asked = {n: state.sample(f, step["cs"]) for n, f in state.filters.items()
                 if n not in (BOUND, BLOCKLIST) and f.owed()}  # fmt: skip
        if asked:
            answers = self.b.call("check", items=asked, mode="batch")["ok"]
            if absent := absent_items(asked, answers):
                raise absence("B", state, absent)
        mine = {n: asked[n] for n in step["check"] if n in asked}
        if mine:
            absent = absent_items(mine, self.a.call("check", items=mine, mode=step["read"])["ok"])
            for pause in (0.3, 0.7, 1.5):  # a mirror may not have seen another process's add
                if not absent:  # for MIRROR_REFRESH_SECONDS (1 s) at most
                    break
                time.sleep(pause)
                answers = self.a.call("check", items=absent, mode=step["read"])["ok"]
                absent = absent_items(absent, answers)
            if absent:
                raise absence("A", state, absent)
        self.check_blocklist(step)
        if state.protected:
            emails = sorted(state.protected)
            picked = random.Random(step["cs"]).sample(emails, min(4, len(emails)))
            unique = self.a.call("validate", emails=sorted(set(picked) | set(emails[-2:])))["ok"]
            if unique:
                raise Violation(
                    "unique",
                    f"the validator called taken e-mails unique: {unique}",
                    forgive=lambda: state.protected.difference_update(unique),
                )
        self.check_orphans()

    def check_orphans(self) -> None:
        named = set()
        for key in self.rig.servers.keys(self.prefix):
            if b"{" in key:
                tag = key.split(b"{", 1)[1].split(b"}", 1)[0].decode()
                named.add(tag.split("/", 1)[0])  # a sharded filter's segment: name/j
        rows = set(self.b.call("rows")["ok"])
        exempt = {n for n, f in self.state.filters.items() if f.revived} | self.exempt
        orphans = sorted(named - rows - exempt)
        if orphans:
            raise Violation(
                "orphan",
                f"keys without a row: {orphans}",
                forgive=lambda: self.exempt.update(orphans),
            )


def run(rig: Rig, *, seed: int | None = None, steps: list[dict] | None = None,
        length: int = 50, until: str | None = None) -> tuple[list[dict], list]:  # fmt: skip
    """Run ``steps`` (a replay: every kind), or ``length`` steps drawn from ``seed`` (on
    the kinds ``run_kinds`` draws from it): the steps run
    and the violations met, ``[(step index, Violation)]``. With ``until`` (a signature)
    the run stops at the first violation that has it."""
    rng = random.Random(seed)
    kinds = None if steps is not None else run_kinds(rig.capabilities["kinds"], seed)
    current = Run(rig, kinds)
    if steps is None:
        current.state.prepare(rng)
    try:
        todo = steps if steps is not None else range(length)
        for index, step in enumerate(todo):
            if steps is None:
                step = current.state.draw(rng, index)
            current.execute(step)
            if until and any(v.signature == until for _, v in current.violations):
                break
        return current.steps, current.violations
    finally:
        current.close()


def first_of_each(violations: list) -> dict[str, tuple[int, Violation]]:
    """The first violation of each signature: ``{signature: (step index, violation)}``."""
    found: dict = {}
    for index, violation in violations:
        found.setdefault(violation.signature, (index, violation))
    return found


def shrink(rig: Rig, steps: list[dict], violation: Violation, seconds: float,
           log=print) -> tuple[list[dict], Violation]:  # fmt: skip
    """Delta debugging (ddmin): the shortest sub-list found within ``seconds`` that still
    breaks an invariant with the same signature, and that violation."""
    deadline = time.monotonic() + seconds
    last = [violation]

    def fails(candidate: list[dict]) -> list[dict] | None:
        """The steps up to the violation, if the candidate still fails."""
        ran, found = run(rig, steps=candidate, until=violation.signature)
        same = first_of_each(found).get(violation.signature)
        if same is None:
            return None
        last[0] = same[1]
        return ran[: same[0] + 1]

    n = 2
    while len(steps) >= 2 and time.monotonic() < deadline:
        chunk = max(1, len(steps) // n)
        for start in range(0, len(steps), chunk):
            if time.monotonic() > deadline:
                break
            candidate = steps[:start] + steps[start + chunk :]
            failing = fails(candidate) if candidate else None
            if failing:
                steps, n = failing, max(n - 1, 2)
                log(f"  shrunk to {len(steps)} steps")
                break
        else:
            if n >= len(steps):
                break
            n = min(len(steps), n * 2)
    return steps, last[0]
