"""Kill a crash host (``support.crash_host``) at a random moment and judge its recovery.

Shared by ``tests/integration/test_crash_recovery.py`` and ``benchmarks/crash_recovery.py``:
start a host running multi-step tasks whose tool records each effect in a file, kill it with
SIGKILL once a random number of effects are recorded, recover its tasks in a new kernel, and
report lost steps, doubled effects, tasks that did not end well, and the database's
``PRAGMA integrity_check``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from providers.sqlite.database import sqlite_driver
from shared.agent_protocol import TaskStatus
from support.crash_host import kernel_for

TESTS = Path(__file__).resolve().parents[1]


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


def wait_for_effects(path: Path, count: int, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while len(effects(path)) < count and time.monotonic() < deadline:
        time.sleep(0.001)


def active_at_kill(data_dir: Path) -> int:
    """How many tasks the killed host left queued or running."""
    database = data_dir / "core_agent.db"
    if not database.exists():
        return 0
    check = sqlite_driver().connect(str(database))
    try:
        (count,) = check.execute(
            "SELECT count(*) FROM agent_tasks WHERE status IN ('queued', 'running')"
        ).fetchone()
    except sqlite_driver().OperationalError:  # killed before the schema was written
        count = 0
    finally:
        check.close()
    return int(count)


def integrity(data_dir: Path) -> str:
    """``PRAGMA integrity_check`` of the data directory's database."""
    check = sqlite_driver().connect(str(data_dir / "core_agent.db"))
    try:
        return str(check.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        check.close()


@dataclass
class KillReport:
    """What one kill and recovery left behind."""

    iteration: int
    strategy: str
    tasks: int
    caught: int
    """Tasks the kill left queued or running (what there was to recover)."""
    lost: list[tuple[str, str]] = field(default_factory=list)
    """(task, step) expected of a succeeded task but never recorded."""
    doubled: list[tuple[str, str]] = field(default_factory=list)
    """(task, step) recorded more than once."""
    unfinished: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(task, status, error) of every task that did not succeed."""
    integrity: str = ""
    recovery_s: float = 0.0
    """From the kill to the end of recovery (lease expiry included)."""

    @property
    def left_active(self) -> int:
        """Tasks still queued or running after recovery."""
        return sum(1 for _, status, _ in self.unfinished if status in ("queued", "running"))

    @property
    def problem(self) -> bool:
        """Anything lost, doubled, not succeeded, or a damaged database."""
        return bool(self.lost or self.doubled or self.unfinished or self.integrity != "ok")


async def kill_and_recover(
    directory: Path, iteration: int, chance: random.Random, *, tasks: int = 3, steps: int = 4
) -> KillReport:
    """Run a host, kill it at a random moment, recover; react and plan_execute alternate."""
    strategy = ("react", "plan_execute")[iteration % 2]
    config = config_in(
        directory,
        tasks=tasks,
        steps=steps,
        strategy=strategy,
        dedupe=True,
        effect_delay_s=0.02,
    )
    host = start_host(config)
    # Killed once a random number of effects are recorded (then a little later): inside
    # a tool, between steps, while a checkpoint is written...
    target = chance.randrange(1, tasks * steps - 1)
    await anyio.to_thread.run_sync(wait_for_effects, Path(config["effects"]), target)
    await anyio.sleep(chance.uniform(0, 0.015))
    host.kill()
    host.wait()
    killed = time.monotonic()
    report = KillReport(iteration, strategy, 0, active_at_kill(Path(config["data_dir"])))
    kernel, recovered = await recover_all(config)
    report.recovery_s = time.monotonic() - killed
    try:
        report.tasks = len(recovered)
        recorded = effects(Path(config["effects"]))
        for task in recovered:
            mine = [step for task_id, step in recorded if task_id == task.task_id]
            counts = Counter(mine)
            report.doubled += [(task.task_id, s) for s, n in counts.items() if n > 1]
            if task.status is not TaskStatus.SUCCEEDED:
                report.unfinished.append((task.task_id, task.status.value, task.error))
            else:
                report.lost += [
                    (task.task_id, s) for s in expected_steps(strategy, steps) - set(mine)
                ]
    finally:
        await kernel.aclose()
    report.integrity = integrity(Path(config["data_dir"]))
    return report
