"""Plan-and-execute overhead per plan step: scripted model in process, a no-op tool.

The plan is a chain of steps (each depends on the one before), so steps never overlap; each
step is a constrained ReAct loop of two model turns (one no-op tool call, then the answer).
A step is timed between consecutive ``plan.step_completed`` events, so it includes
scheduling, the step span, the sub-loop's model and tool calls with their spans and events,
and the checkpoint written after the step. SQLite stores are on.
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
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import PlanStepCompleted, TaskRequest


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


def gateway(steps: int) -> ScriptedLLMGateway:
    chain = [
        {"id": f"s{i}", "goal": f"step {i}", "depends_on": [f"s{i - 1}"] if i else []}
        for i in range(steps)
    ]
    return ScriptedLLMGateway(
        conversations=[
            ScriptedConversation(
                match=r"^Plan this task:",
                turns=[ScriptedTurn(content=json.dumps({"steps": chain}))],
            ),
            ScriptedConversation(
                match=r"^Your step",
                turns=[
                    ScriptedTurn(tool_calls=[ScriptedToolCall(name="noop", arguments={})]),
                    ScriptedTurn(content="step done"),
                ],
            ),
            ScriptedConversation(
                match=r"^Write the final answer", turns=[ScriptedTurn(content="all done")]
            ),
        ]
    )


async def measure(tasks: int, steps: int, data_dir: Path) -> list[float]:
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=data_dir, plan_max_steps=steps))
    container.tool_registry.override(ToolRegistry([noop]))
    container.llm_gateway.override(gateway(steps))
    kernel = container.kernel()
    marks: list[float] = []
    kernel.event_bus.subscribe(PlanStepCompleted, lambda _e: marks.append(time.perf_counter()))
    samples: list[float] = []
    async with kernel:
        for _ in range(tasks):
            marks.clear()
            result = await kernel.execute_task(
                TaskRequest(task="benchmark", force_mode="plan_execute")
            )
            assert result.status.value == "succeeded", result.error
            samples.extend((b - a) * 1000.0 for a, b in itertools.pairwise(marks))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(measure, 3, args.steps, Path(tmp))
        samples = anyio.run(measure, args.tasks, args.steps, Path(tmp))
    stats = summary(samples)
    print(json.dumps({"benchmark": "plan_step_overhead", **stats, "target_p95_ms": 2.0}))
    verdict = "meets" if stats["p95_ms"] < 2.0 else "MISSES"
    print(
        f"plan step overhead over {int(stats['n'])} steps: p50 {stats['p50_ms']:.3f} ms, "
        f"p95 {stats['p95_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms "
        f"({verdict} the p95 < 2 ms target)"
    )


if __name__ == "__main__":
    main()
