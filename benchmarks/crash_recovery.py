"""Crash recovery: hosts killed with SIGKILL at random moments, then recovered.

The script version of ``tests/integration/test_crash_recovery.py``, on the same harness
(``tests/support/crash_harness.py``): each iteration starts a host process
(``support.crash_host``) running ``--tasks`` tasks of ``--steps`` steps (ReAct and
plan-and-execute in turn) whose tool records each effect in a file, with an idempotency key
it deduplicates on; kills it once a random number of effects are recorded (plus up to 15 ms),
inside a tool, between steps or while a checkpoint is written; then recovers the tasks in a
new kernel (leases of 1 s must run out first). Counted over all iterations: steps lost,
effects duplicated, tasks left non-terminal (queued or running) after recovery and tasks
that did not succeed, and ``PRAGMA integrity_check`` results. Goal: 0, 0, 0, all ok.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

import anyio

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # the harness lives with the tests, as ``support``

from benchmarks.stats import summary  # noqa: E402
from support.crash_harness import KillReport, kill_and_recover  # noqa: E402


async def run(iterations: int, seed: int, tasks: int, steps: int, base: Path) -> list[KillReport]:
    chance = random.Random(seed)
    reports = []
    for iteration in range(iterations):
        report = await kill_and_recover(
            base / f"run{iteration}", iteration, chance, tasks=tasks, steps=steps
        )
        reports.append(report)
        if report.problem:
            print(f"iteration {iteration}: {report}", file=sys.stderr)
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reports = anyio.run(run, args.iterations, args.seed, args.tasks, args.steps, Path(tmp))
    lost = sum(len(r.lost) for r in reports)
    doubled = sum(len(r.doubled) for r in reports)
    left_active = sum(r.left_active for r in reports)
    not_succeeded = Counter(status for r in reports for _, status, _ in r.unfinished)
    integrity = Counter(r.integrity for r in reports)
    caught = sum(1 for r in reports if r.caught)
    recovery = summary([r.recovery_s * 1000.0 for r in reports])
    print(
        json.dumps(
            {
                "benchmark": "crash_recovery",
                "iterations": args.iterations,
                "seed": args.seed,
                "tasks": sum(r.tasks for r in reports),
                "kills_with_tasks_in_flight": caught,
                "lost_steps": lost,
                "duplicated_effects": doubled,
                "left_non_terminal": left_active,
                "not_succeeded": dict(not_succeeded),
                "integrity_check": dict(integrity),
                "recovery_ms": recovery,
                "goal": {"lost": 0, "duplicated": 0, "non_terminal": 0, "integrity": "all ok"},
            }
        )
    )
    met = (
        lost == 0
        and doubled == 0
        and left_active == 0
        and not not_succeeded
        and set(integrity) == {"ok"}
    )
    print(
        f"{args.iterations} hosts killed at random moments ({caught} with tasks in flight), "
        f"{sum(r.tasks for r in reports)} tasks: lost steps {lost}, duplicated effects "
        f"{doubled}, left non-terminal {left_active}, not succeeded "
        f"{sum(not_succeeded.values())}, integrity_check "
        f"{', '.join(f'{k} x{v}' for k, v in integrity.items())}; recovery after the kill "
        f"p50 {recovery['p50_ms']:.0f} ms, p95 {recovery['p95_ms']:.0f} ms (1 s leases) "
        f"({'meets' if met else 'MISSES'} the goal 0, 0, 0, all ok)"
    )


if __name__ == "__main__":
    main()
