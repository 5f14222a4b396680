"""WAL growth: the SQLite write-ahead log's size while one kernel runs many tasks.

``--tasks`` tasks (default 2,000) run in one kernel, ``--concurrency`` at a time, each a
ReAct task of two scripted model turns: a ``record(n=<task number>)`` call, then the answer.
Every durable store is on (tasks and events, spans, checkpoints and messages, the tool-call
ledger), all in the data directory's one database. A thread samples the size of the
``-wal`` file every millisecond or so; the largest size seen is compared with the target, and
the database's size at the end is printed beside it. Every task is checked from its events
to have succeeded with its one tool call a success.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from benchmarks.stats import STORES_NOTE, check_tool_steps, durable_settings
from core_agent import KernelContainer, tool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import ChatMessage, TaskRequest, TaskStatus, ToolMessage

TARGET_WAL_MIB = 64.0
MIB = 1 << 20


@tool
async def record(n: int) -> str:
    """Record a number.

    Args:
        n: The number to record.
    """
    return f"recorded {n}"


def policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    """``record(n=<the task's number>)``, then the answer."""
    if any(isinstance(m, ToolMessage) for m in messages):
        return ScriptedTurn(content="done")
    opening = next(m.content for m in messages if m.kind == "user")
    number = int(re.search(r"\d+", opening).group(0))  # type: ignore[union-attr]
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name="record", arguments={"n": number})])


class Sampler:
    """Samples a file's size in a thread (the event loop may be too busy to do it)."""

    def __init__(self, path: Path, every_s: float = 0.001) -> None:
        self.path = path
        self.every_s = every_s
        self.largest = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            self.largest = max(self.largest, size)
            self.samples += 1
            time.sleep(self.every_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def run(tasks: int, concurrency: int, data_dir: Path) -> dict[str, Any]:
    container = KernelContainer()
    settings = durable_settings(data_dir, recovery="off")
    container.settings.override(settings)
    container.tool_registry.override(ToolRegistry([record]))
    container.llm_gateway.override(ScriptedLLMGateway(policy=policy))
    ledger = container.tool_call_ledger()
    kernel = container.kernel()
    database = settings.database_path
    wal = database.with_name(database.name + "-wal")
    results: list[Any] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(number: int) -> None:
        async with limiter:
            request = TaskRequest(task=f"record task {number}", force_mode="react")
            results.append((number, await kernel.execute_task(request)))

    start = time.perf_counter()
    with Sampler(wal) as sampler:
        async with kernel:
            async with anyio.create_task_group() as group:
                for number in range(tasks):
                    group.start_soon(one, number)
            wall_s = time.perf_counter() - start
            wal_before_close = wal.stat().st_size if wal.exists() else 0
            failed = [
                (n, r.status.value, r.error)
                for n, r in results
                if r.status is not TaskStatus.SUCCEEDED
            ]
            assert len(results) == tasks, len(results)
            assert not failed, failed[:5]
            for number, result in results:
                await check_tool_steps(
                    kernel, result.task_id, 1, ledger=ledger, contents=[f"recorded {number}"]
                )
    return {
        "tasks": tasks,
        "concurrency": concurrency,
        "wall_s": wall_s,
        "max_wal_mib": sampler.largest / MIB,
        "wal_at_end_mib": wal_before_close / MIB,
        "db_mib": database.stat().st_size / MIB,
        "samples": sampler.samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = anyio.run(run, args.tasks, args.concurrency, Path(tmp))
    print(json.dumps({"benchmark": "wal_growth", **report, "target_max_wal_mib": TARGET_WAL_MIB}))
    verdict = "meets" if report["max_wal_mib"] < TARGET_WAL_MIB else "MISSES"
    print(
        f"{args.tasks} tasks ({args.concurrency} at a time, a tool call each, all succeeded) in "
        f"{report['wall_s']:.1f} s: largest WAL {report['max_wal_mib']:.1f} MiB "
        f"({verdict} the < {TARGET_WAL_MIB:g} MiB target), WAL at the end "
        f"{report['wal_at_end_mib']:.1f} MiB, database {report['db_mib']:.1f} MiB "
        f"({report['samples']} samples)"
    )
    print(STORES_NOTE)


if __name__ == "__main__":
    main()
