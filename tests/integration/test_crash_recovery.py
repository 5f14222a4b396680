"""A host killed with SIGKILL mid-task, then recovered by another process.

The host (``support.crash_host``) runs multi-step tasks whose tool records each effect in a
file. Whatever the moment of the kill, recovery must leave no step lost, no effect doubled,
every task ended, and the database whole. A crash inside a tool that cannot be repeated safely
goes to a human, with the call and a word that it may or may not have happened.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from shared.agent_protocol import ApprovalDecision, TaskStatus
from support.crash_host import kernel_for

pytestmark = pytest.mark.anyio
TESTS = Path(__file__).resolve().parents[1]
ITERATIONS = int(os.environ.get("CRASH_ITERATIONS", "20"))


def start_host(config: dict[str, Any]) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    with open(Path(config["data_dir"]).parent / "host-stderr.txt", "ab") as errors:
        return subprocess.Popen(
            [sys.executable, "-m", "support.crash_host", json.dumps(config)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )


def effects(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines()]  # type: ignore[misc]


def expected_steps(strategy: str, steps: int) -> set[str]:
    if strategy == "react":
        return {f"r{i}" for i in range(1, steps + 1)}
    first = steps // 2
    return {f"a{i}" for i in range(1, first + 1)} | {f"b{i}" for i in range(1, steps - first + 1)}


async def recover_all(config: dict[str, Any], within_s: float = 20.0) -> Any:
    """Recover in a new kernel until no task is left queued or running (leases expire)."""
    kernel = kernel_for({**config, "recovery": "resume", "crash_at": None})
    deadline = time.monotonic() + within_s
    try:
        while True:
            await kernel.recover()
            active = [
                task
                for status in (TaskStatus.RUNNING, TaskStatus.QUEUED)
                for task in await kernel.list_tasks(status=status, limit=1000)
            ]
            if not active or time.monotonic() > deadline:
                return kernel, await kernel.list_tasks(limit=1000)
            await anyio.sleep(0.2)
    except BaseException:
        await kernel.aclose()
        raise


def config_in(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    (tmp_path / "data").mkdir(parents=True, exist_ok=True)
    return {
        "data_dir": str(tmp_path / "data"),
        "effects": str(tmp_path / "effects.txt"),
        "tasks": 1,
        "steps": 3,
        "strategy": "react",
        "lease_s": 1.0,
        **overrides,
    }


async def test_a_crash_inside_an_idempotent_tool_is_recovered_without_a_repeat(
    tmp_path: Path,
) -> None:
    config = config_in(tmp_path, crash_at="r2", dedupe=True)
    host = start_host(config)
    assert host.wait(timeout=60) == -9  # it killed itself right after the effect of r2
    kernel, tasks = await recover_all(config)
    try:
        (task,) = tasks
        assert task.status is TaskStatus.SUCCEEDED, task.error
        recorded = Counter(step for _, step in effects(Path(config["effects"])))
        assert recorded == Counter({"r1": 1, "r2": 1, "r3": 1})
        resumed = [e for e in await kernel.task_events(task.task_id) if e.kind == "task.resumed"]
        assert resumed and resumed[0].owner == kernel.owner
    finally:
        await kernel.aclose()


async def test_a_call_that_may_or_may_not_have_happened_goes_to_a_human(tmp_path: Path) -> None:
    config = config_in(tmp_path, crash_at="r2", dedupe=False)
    host = start_host(config)
    assert host.wait(timeout=60) == -9
    kernel, tasks = await recover_all(config)
    try:
        (task,) = tasks
        assert task.status is TaskStatus.WAITING_APPROVAL, task.error
        (pending,) = await kernel.pending_approvals()
        assert pending.tool_call is not None and pending.tool_call.name == "effect"
        assert pending.tool_call.arguments == {"step": "r2"}
        assert "may or may not" in (pending.reason or "")
        # Nothing was run again on its own.
        assert Counter(step for _, step in effects(Path(config["effects"]))) == {"r1": 1, "r2": 1}
        done = await kernel.resolve_approval(
            pending.request_id,
            ApprovalDecision(request_id=pending.request_id, approved=True),
        )
        assert done.status is TaskStatus.SUCCEEDED, done.error
        # The human chose to run it again: that is the one repeat.
        assert Counter(step for _, step in effects(Path(config["effects"]))) == {
            "r1": 1,
            "r2": 2,
            "r3": 1,
        }
    finally:
        await kernel.aclose()


async def test_hosts_killed_at_random_moments_lose_and_repeat_nothing(tmp_path: Path) -> None:
    chance = random.Random(int(os.environ.get("CRASH_SEED", "7")))
    report = []
    for iteration in range(ITERATIONS):
        strategy = ("react", "plan_execute")[iteration % 2]
        config = config_in(
            tmp_path / f"run{iteration}",
            tasks=3,
            steps=4,
            strategy=strategy,
            dedupe=True,
            effect_delay_s=0.02,
        )
        host = start_host(config)
        # Killed once a random number of effects are recorded (then a little later): inside
        # a tool, between steps, while a checkpoint is written...
        target = chance.randrange(1, config["tasks"] * config["steps"] - 1)
        await anyio.to_thread.run_sync(wait_for_effects, Path(config["effects"]), target)
        await anyio.sleep(chance.uniform(0, 0.015))
        host.kill()
        host.wait()
        caught = active_at_kill(Path(config["data_dir"]))
        kernel, tasks = await recover_all(config)
        try:
            lost, doubled, unfinished = [], [], []
            recorded = effects(Path(config["effects"]))
            for task in tasks:
                mine = [step for task_id, step in recorded if task_id == task.task_id]
                counts = Counter(mine)
                doubled += [(task.task_id, s) for s, n in counts.items() if n > 1]
                if task.status is not TaskStatus.SUCCEEDED:
                    unfinished.append((task.task_id, task.status.value, task.error))
                else:
                    lost += [(task.task_id, s) for s in expected_steps(strategy, 4) - set(mine)]
        finally:
            await kernel.aclose()
        check = sqlite3.connect(Path(config["data_dir"]) / "core_agent.db")
        integrity = check.execute("PRAGMA integrity_check").fetchone()[0]
        check.close()
        report.append(
            (iteration, strategy, len(tasks), caught, lost, doubled, unfinished, integrity)
        )
    problems = [r for r in report if r[4] or r[5] or r[6] or r[7] != "ok"]
    assert not problems, problems
    # The kills landed while tasks ran (else there was nothing to recover).
    assert sum(1 for r in report if r[3]) >= ITERATIONS // 2, report


def wait_for_effects(path: Path, count: int, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while len(effects(path)) < count and time.monotonic() < deadline:
        time.sleep(0.001)


def active_at_kill(data_dir: Path) -> int:
    """How many tasks the killed host left queued or running."""
    database = data_dir / "core_agent.db"
    if not database.exists():
        return 0
    check = sqlite3.connect(database)
    try:
        (count,) = check.execute(
            "SELECT count(*) FROM agent_tasks WHERE status IN ('queued', 'running')"
        ).fetchone()
    except sqlite3.OperationalError:  # killed before the schema was written
        count = 0
    finally:
        check.close()
    return int(count)
