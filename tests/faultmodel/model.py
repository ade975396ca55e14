"""The fault model: what the controller believes, the steps it draws, the invariants.

A run creates one filter of every registered kind (``f-<kind>``) and the bound filter
``account-emails``, then draws steps from a seeded generator: operations by process A
(the application: cached handles, mirrors, an event loop, fork) and process B
("another process": rebuild, resize, clear, delete-then-recreate, adds), and faults
the controller applies to the servers. After every step it checks the invariants:

- absent: every item whose add returned, or raised an error saying the write was
  applied (``WriteNotReplicated``), reads present or raises, in A and in B;
- orphan: no key of a name without a row (a refused create or re-create);
- unique: the validator never calls a committed e-mail unique.

What a fault takes away, the model takes away too: after ``RESTORE`` of an older
``DUMP`` or a rewind to an older RDB, the items added since are no longer owed (Redis
itself lost them); after ``FLUSHALL`` nothing changes (reads must raise).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter

MODES = ("single", "batch", "async-single", "async-batch")
BOUND, BLOCKLIST = "account-emails", "fm-blocklist"  # not "plain": their own steps write them
CLOCK_SHIFTS = (-150, -75, 0, 75, 330)  # the servers' clock, seconds from the real time
FAILOVER_LAGS = (-150, -90, -45)  # the promoted replica's clock against the primary's
KIND_SHARE = 0.4  # a run drawn from a seed has each kind with this chance (~3 of 7): more
# steps meet on each filter; drawn per kind, so a new kind leaves the others' draws
SAMPLE = 60  # items read per filter and check (the newest 20 always among them)


class Violation(AssertionError):
    """A broken invariant. ``signature`` tells one seam from another (a search reports
    the first of each); ``forgive()`` drops what it is about from the model, so the run
    goes on looking for other seams."""

    def __init__(self, kind: str, message: str, signature: str = "", forgive=lambda: None):
        super().__init__(f"[{kind}] {message}")
        self.kind, self.signature, self.forgive = kind, signature or kind, forgive


class Tracked:
    """One filter as the controller sees it."""

    def __init__(self, name: str, kind: str, capacity: int):
        self.name, self.kind, self.capacity = name, kind, capacity
        self.expected: Counter = Counter()  # item -> adds owed (counting: the count)
        self.origin: dict[str, str] = {}  # item -> the step that made it owed
        self.epoch = 0  # +1 whenever the key's content is replaced (rebuild, clear, ...)
        self.generation = 0  # +1 per re-create (a new key name; handles from before retire)
        self.rebuild: dict | None = None  # a rebuild B has begun and not finished
        self.snapshots: list[tuple] = []  # (epoch, DUMPs, expected) after each recent step
        self.gone = False  # a re-create was refused: maybe no row any more
        self.revived = False  # ... and a rewind may have brought its keys back

    def owed(self) -> list[str]:
        return sorted(item for item, n in self.expected.items() if n > 0)


class State:
    """Everything the controller believes, and the step generator that reads it."""

    def __init__(self, capabilities: dict):
        self.caps = capabilities
        self.filters: dict[str, Tracked] = {}
        self.protected: set[str] = set()  # e-mails the validator must call taken
        self.committed: set[str] = set()
        self.rdb: tuple | None = None  # (path, {name: (epoch, expected)}, protected)
        self.paused = self.full = False
        self.mirrored: set[str] = set()
        self.focus: str | None = None
        self.created = 0
        self.read_rate = 0.35  # how often A reads a filter after a step (drawn per run)
        self.opening: list[dict] = []  # the first steps of a run (its mirrors)

    def prepare(self, rng: random.Random) -> None:
        """Per run: how often A reads, and which filters it mirrors from the start."""
        self.read_rate = rng.choice([0.25, 0.5, 0.9])
        for name, f in self.filters.items():
            if f.kind in self.caps["mirrorable"] and name not in (BOUND, BLOCKLIST):
                if rng.random() < 0.9:
                    self.opening.append({"op": "mirror", "name": name, "on": True})

    # -- the generator -------------------------------------------------------------
    def draw(self, rng: random.Random, index: int) -> dict:
        """The next step (everything it needs is in the dict, so a list replays)."""
        plain = [n for n in self.filters if n not in (BOUND, BLOCKLIST)]
        clock = 3 if self.caps.get("clock") else 0
        if self.opening:
            step = self.opening.pop(0)
            return {**step, "check": plain, "read": "batch", "cs": rng.randrange(1 << 30)}
        weights = {
            "add": 20, "b_add": 12, "remove": 3, "rebuild_begin": 6, "clear": 1.5,
            "recreate": 1.5, "create": 1, "refresh": 2, "mirror": 5, "cancel": 2, "fork": 3,
            "signup": 3, "rebuild_source": 1, "freeze": 0.7, "flushall": 0.4,
            "save_rdb": 1, "pause": 0 if self.paused else 3, "resume": 1.5 if self.paused else 0,
            "fill": 0 if self.full else 1, "unbound": 3 if self.full else 0,
            "rebuild_end": 14 if any(f.rebuild for f in self.filters.values()) else 0,
            "restore": 14, "drop_clients": 2,
            "rewind": 0.7 if self.rdb else 0,
            "clock": clock, "failover": clock / 2, "threads": 4, "block": 3,
        }  # fmt: skip
        for left_out in os.environ.get("BLOOM_FAULT_WITHOUT", "").split(","):
            weights.pop(left_out.strip(), None)
        op = rng.choices(list(weights), list(weights.values()))[0]
        step: dict = {"op": op}
        name = self.focus if self.focus in plain and rng.random() < 0.75 else rng.choice(plain)
        if op == "rebuild_end":
            name = rng.choice([n for n, f in self.filters.items() if f.rebuild])
        elif op == "restore":
            step["back"] = rng.choice([1, 1, 2, 3])  # the key as it was this many steps ago
            step["replay"] = rng.random() < 0.5  # then as many new writes as it undid
        elif op in ("mirror", "remove", "rebuild_begin", "threads"):
            able = {"mirror": "mirrorable", "remove": "removable", "rebuild_begin": "rebuildable",
                    "threads": "mirrorable"}  # fmt: skip
            fit = [n for n in plain if self.filters[n].kind in self.caps[able[op]]]
            fallback = [BOUND] if op == "threads" else plain  # (a standard filter, always there)
            name = name if name in fit else rng.choice(fit or fallback)
        if op in ("add", "b_add", "fork", "freeze", "cancel", "drop_clients"):
            step["mode"] = rng.choice(MODES if op != "b_add" else MODES[:2])
            many = "batch" in step["mode"] and rng.random() < 0.25  # single: 100 ms a WAIT
            count = rng.choice([1, 1, 2, 3]) if not many else rng.randint(20, 200)
            count = rng.randint(50, 400) if op == "cancel" else count
            step["items"] = [f"s{index}-{j}" for j in range(count)]
            step["turns"] = rng.randint(0, 4)
        if op == "remove":
            step["picks"] = [rng.random() for _ in range(rng.randint(1, 3))]
        if op in ("rebuild_begin", "recreate", "create"):
            step["capacity"] = rng.choice([None, 1500, 3000, 6000] if op == "rebuild_begin"
                                          else [2000, 5000, 200_000])  # fmt: skip
        if op == "create":
            self.created += 1
            name = f"n{self.created}"
            step["kind"] = rng.choice(self.caps["kinds"])
        if op == "recreate":
            step["kind"] = self.filters[name].kind
        if op == "mirror":
            step["on"] = name not in self.mirrored
        if op == "signup":
            step["email"] = f"user{index}@example.org"
        if op == "rewind":
            step["how"] = rng.choice(["restart", "reload"])
        if op == "clock":
            step["shift"] = rng.choice(CLOCK_SHIFTS)
        if op == "failover":
            step["lag"] = rng.choice(FAILOVER_LAGS)
        if op == "threads":  # several threads of A share the handle and its mirror
            step.update(writers=rng.choice([2, 3, 4]), seconds=rng.choice([0.5, 1.0]),
                        handoff=rng.choice([0.1, 0.3]), seed=rng.randrange(1 << 30))  # fmt: skip
        if op == "block":
            step["networks"] = [f"100.64.{index}.{16 * j}/28" for j in range(rng.randint(1, 3))]
        if op in ("add", "b_add", "remove", "rebuild_begin", "rebuild_end", "clear", "recreate",
                  "mirror", "cancel", "fork", "freeze", "restore", "create",
                  "drop_clients", "threads"):  # fmt: skip
            step["name"] = name
            self.focus = name
        step["check"] = sorted(n for n in plain if rng.random() < self.read_rate)  # A reads
        if step.get("replay"):  # the traffic after a failover reads too
            step["check"] = sorted({*step["check"], name})
        step["read"] = rng.choice(MODES)
        step["cs"] = rng.randrange(1 << 30)
        return step

    # -- what the steps owe ---------------------------------------------------------------
    def acknowledged(self, f: Tracked, step: dict, index: int, reply: dict) -> None:
        """An add's reply: returned, or an error saying it was applied -> owed."""
        items = step["items"]
        if "ok" in reply and isinstance(reply["ok"], list):  # per item: an answer or an error
            owed = [(i, r) for i, r in zip(items, reply["ok"], strict=True)
                    if not isinstance(r, dict) or r.get("applied")]  # fmt: skip
        elif "ok" in reply or reply.get("applied"):
            owed = [(i, reply.get("err") and reply) for i in items]
        else:
            owed = []
        for item, answer in owed:
            f.expected[item] += 1
            how = answer["err"] if isinstance(answer, dict) else "returned"
            f.origin[item] = (index, step["op"], how)

    def sample(self, f: Tracked, cs: int) -> list[str]:
        owed = f.owed()
        if len(owed) <= SAMPLE:
            return owed
        newest = sorted(owed, key=lambda item: tuple(map(int, item[1:].split("-"))))[-20:]
        rest = random.Random(cs).sample(owed, SAMPLE - 20)
        return sorted(set(newest) | set(rest))

    def rewound(self) -> None:
        """Redis went back to the saved RDB: what it held then is owed, nothing since."""
        _, saved, protected = self.rdb
        for f in self.filters.values():
            then = saved.get(f.name)
            if then is not None and then[0] == f.epoch and f.rebuild is None:
                f.expected = Counter(then[1])
            else:
                f.expected = Counter()
                if f.rebuild is not None:
                    f.rebuild["tainted"] = True
            f.revived = f.revived or f.gone
        self.protected = set(protected)


def absent_items(asked: dict, answers: dict) -> dict[str, list[str]]:
    """``{name: items answered absent}`` (an error is an allowed answer)."""
    absent = {}
    for name, items in asked.items():
        reply = answers[name]
        if "ok" in reply:
            missing = [item for item, seen in zip(items, reply["ok"], strict=True) if seen is False]
            if missing:
                absent[name] = missing
    return absent


def absence(who: str, state: State, absent: dict[str, list[str]]) -> Violation:
    name, items = next(iter(absent.items()))
    f = state.filters[name]
    origins = [f.origin.get(item, (-1, "?", "?")) for item in items]
    shown = "; ".join(
        f"{i}: step {o[0]} {o[1]} ({o[2]})" for i, o in zip(items, origins, strict=True)
    )
    mirrored = who == "A" and name in state.mirrored
    how = "returned" if origins[0][2] == "returned" else f"raised {origins[0][2]}"
    signature = f"absent in {who}{' (its mirror)' if mirrored else ''}, the add {how}"

    def forgive():
        for other, missing in absent.items():
            for item in missing:
                state.filters[other].expected.pop(item, None)

    return Violation(
        "absent",
        f"process {who} answered absent for {len(items)} item(s) owed by filter {name!r} "
        f"(kind {f.kind}, mirrored in A: {name in state.mirrored}): {shown[:400]}",
        signature,
        forgive,
    )


def run_kinds(kinds: list[str], seed: int) -> list[str]:
    """The kinds of a run drawn from ``seed``: each on its own draw (seed and kind), so a
    kind added later leaves every other kind's draw, and the seed's run, as it was."""
    drawn = [k for k in kinds if random.Random(f"{seed}/{k}").random() < KIND_SHARE]
    return sorted(drawn) or [min(kinds, key=lambda k: random.Random(f"{seed}/{k}").random())]


def describe(steps: list[dict]) -> str:
    """One line a step, without the check-only fields."""
    lines = []
    for i, step in enumerate(steps):
        shown = {k: v for k, v in step.items() if k not in ("check", "read", "cs")}
        if len(shown.get("items", [])) > 3:
            shown["items"] = f"{len(shown['items'])} items"
        lines.append(f"  {i:3d} {json.dumps(shown)}  (A reads {step['check']} {step['read']})")
    return "\n".join(lines)
