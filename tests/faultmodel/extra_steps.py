"""The fault model's steps of issue 34, mixed into ``runner.Run``: the servers' clock
stepped, a failover to a replica whose clock lags, threads of A sharing a handle and its
mirror, and the blocklist (``block``, and its invariant: a listed network blocks)."""

from __future__ import annotations

import ipaddress
import random

from tests.faultmodel.model import BLOCKLIST, Violation, absence


class ExtraSteps:
    """Uses the run's ``a``, ``b``, ``rig``, ``state``, ``index``, ``violations``, ``recover``."""

    def do_threads(self, step, f):
        """Threads of A add through one handle and its mirror (``worker.op_threads``): an
        item read absent by its own thread right after its add is a violation at once."""
        reply = self.a.call(
            "threads", name=f.name, prefix=f"s{self.index}", writers=step["writers"],
            seconds=step["seconds"], handoff=step["handoff"], seed=step["seed"],
        )  # fmt: skip
        if "err" in reply:
            return
        reply = reply["ok"]
        self.state.acknowledged(f, {**step, "items": reply["items"]}, self.index,
                                {"ok": reply["answers"]})  # fmt: skip
        if reply["unseen"]:
            unseen = reply["unseen"]
            self.violations.append((self.index, Violation(
                "absent",
                f"process A's own threads read {len(unseen)} of their own adds absent right "
                f"after the add returned (filter {f.name!r}, kind {f.kind}, through its "
                f"mirror): {unseen[:5]}",
                "absent in A (its mirror), read by the adding thread",
            )))  # fmt: skip

    def do_block(self, step, f, index=None):
        """A blocks networks (``ipblock.block``): owed once ``block`` returned (an error,
        even WriteNotReplicated, rolled the row back: a filter hit alone blocks nobody)."""
        reply = self.a.call("block", networks=step["networks"])["ok"]
        blocklist = self.state.filters[BLOCKLIST]
        for network, answer in zip(step["networks"], reply, strict=True):
            if not isinstance(answer, dict):
                blocklist.expected[network] += 1
                blocklist.origin[network] = (self.index if index is None else index, "block",
                                             "returned")  # fmt: skip

    def do_clock(self, step, f):
        """The servers' clock stepped (NTP, a VM resumed): ``shift`` s from the real time."""
        self.rig.servers.set_clock(step["shift"])

    def do_failover(self, step, f):
        """A failover to the replica (it had every write), whose clock is ``lag`` s off."""
        self.rig.servers.failover(step["lag"])
        self.state.paused = self.state.full = False
        self.recover()

    def check_blocklist(self, step: dict) -> None:
        """Every network whose ``block`` returned blocks an address inside it, in B and in
        A (``check_ip``: the filter, then the row), or the check raises."""
        owed = self.state.filters[BLOCKLIST].owed()
        if not owed:
            return
        networks = sorted(random.Random(step["cs"]).sample(owed, min(8, len(owed))))
        addresses = [str(ipaddress.ip_network(n)[1]) for n in networks]
        for who, worker in (("B", self.b), ("A", self.a)):
            answers = worker.call("blocked", addresses=addresses)["ok"]
            missing = [n for n, a in zip(networks, answers, strict=True) if a is False]
            if missing:
                raise absence(who, self.state, {BLOCKLIST: missing})
