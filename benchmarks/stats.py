"""Percentiles for the benchmark scripts."""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from core_agent import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool_call_ledger import IToolCallLedger


def summary(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, mean and count of samples in milliseconds."""
    ordered = sorted(samples_ms)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "n": float(len(ordered)),
        "p50_ms": statistics.median(ordered),
        "p95_ms": cuts[94],
        "p99_ms": cuts[98],
        "mean_ms": statistics.fmean(ordered),
    }


STORES_NOTE = (
    "SQLite task, trace and checkpoint stores and tool-call ledger on "
    "(AGENT_CHECKPOINT_STORE=sqlite, AGENT_TOOL_CALL_LEDGER=sqlite)"
)
MEMORY_STORES_NOTE = (
    "--stores memory: the tests' in-memory task, trace and checkpoint stores and tool-call "
    "ledger in place of SQLite (the same records kept in Python, checkpoints and messages as "
    "JSON): what is left is the kernel's own work, which no faster storage would remove"
)
STORES = ("sqlite", "memory")
"""What ``--stores`` chooses between: the durable SQLite stores (what the targets are about),
or in-memory ones, to tell what of a figure is the database's and what the kernel's."""


def stores_note(stores: str) -> str:
    """The sentence a benchmark prints about the stores it ran on."""
    return MEMORY_STORES_NOTE if stores == "memory" else STORES_NOTE


def add_stores_option(parser: argparse.ArgumentParser) -> None:
    """``--stores sqlite|memory`` (see ``STORES``)."""
    parser.add_argument(
        "--stores",
        choices=STORES,
        default="sqlite",
        help="sqlite (the default, what the target is about) or memory (the same run without "
        "a database, to see what of the figure the database costs)",
    )


def kernel_container(stores: str = "sqlite") -> KernelContainer:
    """A kernel container, with in-memory stores in place of SQLite for ``memory``.

    The in-memory stores are the tests' fakes (``tests/fakes/stores.py``), imported only here:
    run from the project's root, as the README says, ``tests`` is importable.
    """
    container = KernelContainer()
    if stores == "memory":
        from tests.fakes.stores import (
            FakeCheckpointStore,
            FakeTaskStore,
            FakeToolCallLedger,
            FakeTraceStore,
        )

        container.task_store.override(FakeTaskStore())
        container.trace_store.override(FakeTraceStore())
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
    elif stores != "sqlite":
        raise ValueError(f"stores must be one of {STORES}, not {stores!r}")
    return container


def durable_settings(data_dir: Path, **fields: Any) -> AgentSettings:
    """Settings with every durable store on SQLite in ``data_dir``, plus ``fields``.

    The stores are the defaults, set explicitly so that an ``AGENT_*`` variable in the
    environment cannot turn checkpoints or the ledger off.
    """
    return AgentSettings(
        data_dir=data_dir,
        task_store="sqlite",
        trace_store="sqlite",
        checkpoint_store="sqlite",
        tool_call_ledger="sqlite",
        **fields,
    )


async def check_tool_steps(
    kernel: Any,
    task_id: str,
    expected: int,
    *,
    ledger: IToolCallLedger | None = None,
    contents: Sequence[str] | None = None,
) -> None:
    """Assert the task really ran ``expected`` tool calls, each a success.

    From its events: exactly ``expected`` ``tool.completed``, none an error (a refused repeat,
    a loop detected, a policy denial, a tool error), with ``contents`` in that order when
    given. With ``ledger``: as many ledger rows, all ``finished``.
    """
    completed = [e for e in await kernel.task_events(task_id) if e.kind == "tool.completed"]
    failures = [
        (e.result.name, e.result.error_type, e.result.content[:120])
        for e in completed
        if e.result.is_error
    ]
    assert not failures, f"task {task_id}: tool calls that did not do their work: {failures}"
    assert len(completed) == expected, (
        f"task {task_id}: {len(completed)} tool.completed events, expected {expected}"
    )
    if contents is not None:
        got = [e.result.content for e in completed]
        assert got == list(contents), f"task {task_id}: tool results {got[:5]}..."
    if ledger is not None:
        entries = await ledger.entries(task_id)
        unfinished = [(e.tool, e.status) for e in entries if e.status != "finished"]
        assert len(entries) == expected, f"task {task_id}: {len(entries)} ledger rows"
        assert not unfinished, f"task {task_id}: ledger rows not finished: {unfinished}"


Verify = Callable[[Any, Any], Awaitable[None]]
"""Checks one finished task: ``verify(kernel, result)``, raising ``AssertionError``."""


async def intervals_between(
    kernel: Any,
    event_type: type[Any],
    request: Any,
    tasks: int,
    verify: Verify | None = None,
) -> list[float]:
    """Run ``request`` ``tasks`` times; milliseconds between consecutive ``event_type`` events.

    ``verify`` checks each task after it ended (outside the timed intervals).
    """
    marks: list[float] = []
    kernel.event_bus.subscribe(event_type, lambda _event: marks.append(time.perf_counter()))
    samples: list[float] = []
    async with kernel:
        for _ in range(tasks):
            marks.clear()
            result = await kernel.execute_task(request)
            assert result.status.value == "succeeded", result.error
            samples.extend((b - a) * 1000.0 for a, b in itertools.pairwise(marks))
            if verify is not None:
                await verify(kernel, result)
    return samples


def run_step_benchmark(
    name: str,
    label: str,
    measure: Callable[[int, int, Path, str], Awaitable[list[float]]],
    *,
    doc: str | None,
    default_tasks: int,
    target_p95_ms: float = 2.0,
    note: str | None = None,
) -> None:
    """Parse ``--tasks``/``--steps``/``--stores``, warm up, measure, print JSON and a sentence.

    ``measure(tasks, steps, data_dir, stores)``; ``note`` is printed with the stores' note.
    """
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--tasks", type=int, default=default_tasks)
    parser.add_argument("--steps", type=int, default=20)
    add_stores_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(measure, 3, args.steps, Path(tmp), args.stores)  # warm-up: imports, caches
        samples = anyio.run(measure, args.tasks, args.steps, Path(tmp), args.stores)
    stats = summary(samples)
    print(
        json.dumps(
            {"benchmark": name, **stats, "stores": args.stores, "target_p95_ms": target_p95_ms}
        )
    )
    print(f"{note}; {stores_note(args.stores)}" if note else stores_note(args.stores))
    verdict = "meets" if stats["p95_ms"] < target_p95_ms else "MISSES"
    print(
        f"{label} over {int(stats['n'])} steps: p50 {stats['p50_ms']:.3f} ms, "
        f"p95 {stats['p95_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms "
        f"({verdict} the p95 < {target_p95_ms:g} ms target)"
    )
