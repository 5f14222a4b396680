"""Many tasks in flight in one kernel: N tasks at once, each one 200 ms model call.

The model is a gateway that waits 200 ms (``anyio.sleep``) and answers; nothing else costs
time, so a kernel that keeps N tasks in flight at once ends them all in about 200 ms. The
wall time from submitting the first task to the end of the last is compared with that ideal
(200 ms and nothing more) as a ratio. SQLite stores (tasks, traces, checkpoints, tool-call
ledger) live in a temporary data directory; the kernel is warmed up with a few tasks first.

Every task must succeed with exactly one model call (checked from its events). The spread of
the model calls' start times shows how long the kernel took to get all N tasks to their
model call (the work it does before a call, one task after another on the event loop).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from benchmarks.stats import (
    add_stores_option,
    durable_settings,
    kernel_container,
    stores_note,
    summary,
)
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMStreamItem
from core_agent.tooling.registry import ToolRegistry
from shared.agent_protocol import AssistantMessage, TaskRequest, TaskStatus, TokenUsage

MODEL_S = 0.2
TARGET_RATIO = 2.0


class SleepingGateway(ILLMGateway):
    """Answers every call after ``delay_s`` of waiting, as a remote model would."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.started: list[float] = []

    @property
    def model_name(self) -> str:
        return "bench/sleeping"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.started.append(time.perf_counter())
        await anyio.sleep(self.delay_s)
        return LLMResponse(
            message=AssistantMessage(content="done"),
            usage=TokenUsage(input_tokens=10, output_tokens=1),
            model=self.model_name,
            finish_reason="stop",
        )

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        yield await self.complete(request)


async def run(
    tasks: int, data_dir: Path, warmup: int = 10, stores: str = "sqlite"
) -> dict[str, Any]:
    gateway = SleepingGateway(MODEL_S)
    container = kernel_container(stores)
    container.settings.override(durable_settings(data_dir))
    container.tool_registry.override(ToolRegistry([]))
    container.llm_gateway.override(gateway)
    kernel = container.kernel()
    request = TaskRequest(task="answer", force_mode="react")
    results: list[Any] = []

    async def one() -> None:
        results.append(await kernel.execute_task(request))

    async with kernel:
        async with anyio.create_task_group() as group:  # warm-up, not timed
            for _ in range(warmup):
                group.start_soon(one)
        results.clear()
        gateway.started.clear()
        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(one)
        wall_s = time.perf_counter() - start
        # Every task really made its one model call and succeeded.
        assert len(results) == tasks, len(results)
        assert len(gateway.started) == tasks, len(gateway.started)
        failed = [
            (r.task_id, r.status.value, r.error)
            for r in results
            if r.status is not TaskStatus.SUCCEEDED
        ]
        assert not failed, failed[:5]
        for result in results:
            kinds = [e.kind for e in await kernel.task_events(result.task_id)]
            assert kinds.count("llm.completed") == 1, kinds
            assert kinds[-1] == "task.succeeded", kinds
    starts = [(t - start) * 1000.0 for t in gateway.started]
    return {
        "tasks": tasks,
        "wall_ms": wall_s * 1000.0,
        "ideal_ms": MODEL_S * 1000.0,
        "ratio": wall_s / MODEL_S,
        "first_model_call_ms": min(starts),
        "last_model_call_ms": max(starts),
        "model_call_start": summary(starts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, nargs="+", default=[100, 1000])
    add_stores_option(parser)
    args = parser.parse_args()
    for tasks in args.tasks:
        with tempfile.TemporaryDirectory() as tmp:
            report = anyio.run(run, tasks, Path(tmp), 10, args.stores)
        target = TARGET_RATIO if tasks == max(args.tasks) else None
        print(
            json.dumps(
                {
                    "benchmark": "tasks_in_flight",
                    **report,
                    "stores": args.stores,
                    "target_ratio": target,
                }
            )
        )
        verdict = (
            ""
            if target is None
            else f" ({'meets' if report['ratio'] < target else 'MISSES'} the < {target:g}x target)"
        )
        print(
            f"{tasks} tasks in flight, one {MODEL_S * 1000:.0f} ms model call each: wall "
            f"{report['wall_ms']:.0f} ms = {report['ratio']:.2f}x the ideal "
            f"{report['ideal_ms']:.0f} ms{verdict}; model calls started between "
            f"{report['first_model_call_ms']:.0f} and {report['last_model_call_ms']:.0f} ms; "
            f"all {tasks} succeeded with one model call each"
        )
    print(stores_note(args.stores))


if __name__ == "__main__":
    main()
