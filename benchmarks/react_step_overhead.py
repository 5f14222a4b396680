"""Kernel overhead per ReAct step: scripted model in process, a no-op tool, traces on.

A step is one model turn that asks for a tool plus the tool call. The model and the tool cost
next to nothing, so the time per step is what the kernel adds: events persisted to SQLite,
spans written, the bus, validation, the thread hops. Steps are timed between consecutive
``tool.completed`` events, so task start-up and shutdown are not counted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks.stats import summary
from core_agent import KernelContainer, tool
from core_agent.contracts.settings import AgentSettings
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import TaskRequest, ToolCompleted


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


async def measure(tasks: int, steps: int, data_dir: Path) -> list[float]:
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=data_dir, max_turns=steps + 1))
    container.tool_registry.override(ToolRegistry([noop]))
    script = [ScriptedTurn(tool_calls=[ScriptedToolCall(name="noop", arguments={})])] * steps
    container.llm_gateway.override(ScriptedLLMGateway([*script, ScriptedTurn(content="done")]))
    kernel = container.kernel()
    marks: list[float] = []
    kernel.event_bus.subscribe(ToolCompleted, lambda _event: marks.append(time.perf_counter()))
    samples: list[float] = []
    async with kernel:
        for _ in range(tasks):
            marks.clear()
            result = await kernel.execute_task(TaskRequest(task="benchmark"))
            assert result.status.value == "succeeded", result.error
            samples.extend((b - a) * 1000.0 for a, b in itertools.pairwise(marks))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(measure, 3, args.steps, Path(tmp))  # warm-up: imports, caches, WAL file
        samples = anyio.run(measure, args.tasks, args.steps, Path(tmp))
    stats = summary(samples)
    print(json.dumps({"benchmark": "react_step_overhead", **stats, "target_p95_ms": 2.0}))
    verdict = "meets" if stats["p95_ms"] < 2.0 else "MISSES"
    print(
        f"ReAct step overhead over {int(stats['n'])} steps: p50 {stats['p50_ms']:.3f} ms, "
        f"p95 {stats['p95_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms "
        f"({verdict} the p95 < 2 ms target)"
    )


if __name__ == "__main__":
    main()
