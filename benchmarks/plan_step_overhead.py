"""Plan-and-execute overhead per plan step: scripted model in process, a no-op tool.

The plan is a chain of steps (each depends on the one before), so steps never overlap; each
step is a constrained ReAct loop of two model turns (one no-op tool call, then the answer).
A step is timed between consecutive ``plan.step_completed`` events, so it includes
scheduling, the step span, the sub-loop's model and tool calls with their spans and events,
and the checkpoint written after the step. SQLite stores, checkpoints and the tool-call
ledger are on.

Each step's sub-loop is a loop of its own, so its ``noop()`` call is not a repeat that loop
detection would refuse; after each task its events and ledger are checked all the same: one
successful tool call per plan step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.stats import (
    check_tool_steps,
    durable_settings,
    intervals_between,
    kernel_container,
    run_step_benchmark,
)
from core_agent import tool
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


async def measure(tasks: int, steps: int, data_dir: Path, stores: str = "sqlite") -> list[float]:
    container = kernel_container(stores)
    container.settings.override(durable_settings(data_dir, plan_max_steps=steps))
    container.tool_registry.override(ToolRegistry([noop]))
    container.llm_gateway.override(gateway(steps))
    ledger = container.tool_call_ledger()

    async def verify(kernel: Any, result: Any) -> None:
        await check_tool_steps(kernel, result.task_id, steps, ledger=ledger)
        events = await kernel.task_events(result.task_id)
        assert sum(e.kind == "plan.step_completed" for e in events) == steps

    return await intervals_between(
        container.kernel(),
        PlanStepCompleted,
        TaskRequest(task="benchmark", force_mode="plan_execute"),
        tasks,
        verify,
    )


def main() -> None:
    run_step_benchmark(
        "plan_step_overhead",
        "plan step overhead",
        measure,
        doc=__doc__,
        default_tasks=40,
        note="every plan step one successful noop() call, checked from events and ledger",
    )


if __name__ == "__main__":
    main()
