"""What the synchronous facade adds to a call, over awaiting the async kernel directly.

One kernel (SQLite stores in a temporary directory, scripted model in process) runs on a
``SyncKernel``'s loop thread. Each operation is measured both ways, interleaved so that drift
in the machine's load weighs on both alike:

- async: ``await kernel.<op>(...)``, timed on the loop thread itself;
- sync: the same coroutine through ``SyncKernel.call`` from the host's thread (what
  ``SyncKernel.get_task`` and ``execute_task`` are), timed there.

The sync side is also timed inside the loop, so its *hand-off* (from the host's call to the
coroutine starting, plus from its return to the host having the value) is measured apart
from the operation's own time: the overhead, free of the operation's run-to-run noise. For
``stream``, the hand-off is the delay from the final event's publication on the loop to the
iterating thread receiving it.

Operations: ``get_task`` (one SQLite read, no model); ``execute_task`` of a task that makes
one real tool call ``record(n=i)`` and answers; ``stream`` of the same task to its final
event. Each task is checked from its stored events: succeeded, one successful tool call that
returned its own ``recorded i``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.stats import STORES_NOTE, durable_settings, summary
from core_agent import KernelContainer, SyncKernel, tool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import ChatMessage, TaskRequest, TaskSucceeded, ToolMessage

TARGET_P95_MS = 1.0


@tool
async def record(n: int) -> str:
    """Record a number.

    Args:
        n: The number to record.
    """
    return f"recorded {n}"


def _policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    """Call ``record`` with the number that ends the task's text, then answer."""
    if isinstance(messages[-1], ToolMessage):
        return ScriptedTurn(content="done")
    n = int(messages[-1].content.split()[-1])
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name="record", arguments={"n": n})])


def make_kernel(data_dir: Path) -> SyncKernel:
    container = KernelContainer()
    container.settings.override(durable_settings(data_dir, recovery="off"))
    container.tool_registry.override(ToolRegistry([record]))
    container.llm_gateway.override(ScriptedLLMGateway(policy=_policy))
    return SyncKernel(container.kernel())


def request(n: int) -> TaskRequest:
    return TaskRequest(task=f"record the number {n}", force_mode="react")


def verify(sync: SyncKernel, task_id: str, n: int) -> None:
    events = sync.task_events(task_id)
    assert events[-1].kind == "task.succeeded", events[-1]
    completed = [e for e in events if e.kind == "tool.completed"]
    assert len(completed) == 1, f"task {task_id}: {len(completed)} tool calls"
    result = completed[0].result  # type: ignore[attr-defined]
    assert not result.is_error, result
    assert result.content == f"recorded {n}", result


async def _timed(op: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    """Run ``op`` on the loop; when it started and ended there (perf_counter), its value."""
    start = time.perf_counter()
    value = await op()
    return start, time.perf_counter(), value


def row(
    name: str, async_ms: list[float], sync_ms: list[float], handoff_ms: list[float]
) -> dict[str, Any]:
    a, s, h = summary(async_ms), summary(sync_ms), summary(handoff_ms)
    return {
        "operation": name,
        "pairs": len(async_ms),
        "async_p50_ms": round(a["p50_ms"], 4),
        "async_p95_ms": round(a["p95_ms"], 4),
        "sync_p50_ms": round(s["p50_ms"], 4),
        "sync_p95_ms": round(s["p95_ms"], 4),
        "ratio_p50": round(s["p50_ms"] / a["p50_ms"], 3),
        "ratio_p95": round(s["p95_ms"] / a["p95_ms"], 3),
        "p95_difference_ms": round(s["p95_ms"] - a["p95_ms"], 4),
        "handoff_p50_ms": round(h["p50_ms"], 4),
        "handoff_p95_ms": round(h["p95_ms"], 4),
        "handoff_p99_ms": round(h["p99_ms"], 4),
    }


def measure_calls(
    sync: SyncKernel,
    name: str,
    pairs: int,
    op: Callable[[int], Callable[[], Awaitable[Any]]],
    check: Callable[[int, Any], None],
) -> dict[str, Any]:
    """``pairs`` interleaved async/sync samples of one coroutine; its row of the report."""
    async_ms: list[float] = []
    sync_ms: list[float] = []
    handoff_ms: list[float] = []
    for i in range(pairs):
        # Async: awaited on the loop thread, timed there.
        start, end, value = sync.call(_timed, op(2 * i))
        async_ms.append((end - start) * 1000.0)
        check(2 * i, value)
        # Sync: the host thread's call, timed by the host and, inside it, on the loop.
        called = time.perf_counter()
        start, end, value = sync.call(_timed, op(2 * i + 1))
        returned = time.perf_counter()
        sync_ms.append((returned - called) * 1000.0)
        handoff_ms.append(((start - called) + (returned - end)) * 1000.0)
        check(2 * i + 1, value)
    return row(name, async_ms, sync_ms, handoff_ms)


def measure_stream(sync: SyncKernel, pairs: int) -> dict[str, Any]:
    kernel = sync.kernel
    published: dict[str, float] = {}
    kernel.event_bus.subscribe(
        TaskSucceeded, lambda event: published.__setitem__(event.task_id, time.perf_counter())
    )

    async def stream_async(n: int) -> list[Any]:
        return [event async for event in kernel.stream_task(request(n))]

    async_ms: list[float] = []
    sync_ms: list[float] = []
    handoff_ms: list[float] = []
    for i in range(pairs):
        start, end, events = sync.call(_timed, lambda i=i: stream_async(2 * i))
        async_ms.append((end - start) * 1000.0)
        verify(sync, events[-1].task_id, 2 * i)
        called = time.perf_counter()
        events = []
        for event in sync.stream(request(2 * i + 1)):
            received = time.perf_counter()
            events.append(event)
        sync_ms.append((time.perf_counter() - called) * 1000.0)
        final = events[-1]
        assert final.kind == "task.succeeded", final
        handoff_ms.append((received - published[final.task_id]) * 1000.0)
        verify(sync, final.task_id, 2 * i + 1)
    return row("stream to the final event (1 tool call)", async_ms, sync_ms, handoff_ms)


def run(data_dir: Path, scale: float) -> list[dict[str, Any]]:
    with make_kernel(data_dir) as sync:
        kernel = sync.kernel
        first = sync.execute_task(request(0))
        verify(sync, first.task_id, 0)

        def found(_n: int, state: Any) -> None:
            assert state.task_id == first.task_id

        def succeeded(n: int, result: Any) -> None:
            assert result.status.value == "succeeded", result.error
            verify(sync, result.task_id, n)

        return [
            measure_calls(
                sync,
                "get_task",
                int(2000 * scale),
                lambda _n: lambda: kernel.get_task(first.task_id),
                found,
            ),
            measure_calls(
                sync,
                "execute_task (1 tool call)",
                int(300 * scale),
                lambda n: lambda: kernel.execute_task(request(n)),
                succeeded,
            ),
            measure_stream(sync, int(300 * scale)),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the sample counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp) / "warm-up", 0.05)  # imports, caches, the WAL file
        rows = run(Path(tmp) / "measured", args.scale)
    for entry in rows:
        print(json.dumps({"benchmark": "sync_facade_overhead", **entry, "target_p95_ms": 1.0}))
    print(f"every task checked from its events: one successful record(n=i) call; {STORES_NOTE}")
    for entry in rows:
        verdict = "meets" if entry["handoff_p95_ms"] < TARGET_P95_MS else "MISSES"
        print(
            f"{entry['operation']}: async p50 {entry['async_p50_ms']:.3f} / p95 "
            f"{entry['async_p95_ms']:.3f} ms, sync p50 {entry['sync_p50_ms']:.3f} / p95 "
            f"{entry['sync_p95_ms']:.3f} ms (ratio {entry['ratio_p50']:.2f} / "
            f"{entry['ratio_p95']:.2f}); facade hand-off p50 {entry['handoff_p50_ms']:.3f} ms, "
            f"p95 {entry['handoff_p95_ms']:.3f} ms ({verdict} the p95 < {TARGET_P95_MS:g} ms "
            "target)"
        )


if __name__ == "__main__":
    main()
