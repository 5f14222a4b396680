"""Kernel overhead per ReAct step: scripted model in process, a cheap real tool, durable stores.

A step is one model turn that asks for a tool plus the tool call. Each step calls ``record``
with different arguments (``n=1``, ``n=2``, ...), and every call really runs: ``record`` is not
declared idempotent, so loop detection never answers it from memory, and the distinct
arguments let each step's result be checked. The model and the tool
cost next to nothing, so the time per step is what the kernel adds: the step's checkpoint and
messages, the tool-call ledger rows, events persisted to SQLite, spans, the bus, validation.
Steps are timed between consecutive ``tool.completed`` events, so task start-up and shutdown
are not counted. After each task its events and ledger are checked: as many successful tool
calls as steps, each with its own result.
"""

from __future__ import annotations

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
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import TaskRequest, ToolCompleted

RECORDED: list[int] = []


@tool
async def record(n: int) -> str:
    """Record a number.

    Args:
        n: The number to record.
    """
    RECORDED.append(n)
    return f"recorded {n}"


async def measure(tasks: int, steps: int, data_dir: Path, stores: str = "sqlite") -> list[float]:
    container = kernel_container(stores)
    container.settings.override(durable_settings(data_dir, max_turns=steps + 1))
    container.tool_registry.override(ToolRegistry([record]))
    script = [
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="record", arguments={"n": n})])
        for n in range(1, steps + 1)
    ]
    container.llm_gateway.override(ScriptedLLMGateway([*script, ScriptedTurn(content="done")]))
    ledger = container.tool_call_ledger()

    async def verify(kernel: Any, result: Any) -> None:
        await check_tool_steps(
            kernel,
            result.task_id,
            steps,
            ledger=ledger,
            contents=[f"recorded {n}" for n in range(1, steps + 1)],
        )
        assert list(range(1, steps + 1)) == RECORDED, RECORDED
        RECORDED.clear()

    RECORDED.clear()
    return await intervals_between(
        container.kernel(),
        ToolCompleted,
        TaskRequest(task="benchmark", force_mode="react"),
        tasks,
        verify,
    )


def main() -> None:
    run_step_benchmark(
        "react_step_overhead",
        "ReAct step overhead",
        measure,
        doc=__doc__,
        default_tasks=60,
        target_p95_ms=0.5,
        note="every step a successful record(n=i) call, checked from events and ledger",
    )


if __name__ == "__main__":
    main()
