"""Kernel overhead per ReAct step: scripted model in process, a no-op tool, traces on.

A step is one model turn that asks for a tool plus the tool call. The model and the tool cost
next to nothing, so the time per step is what the kernel adds: events persisted to SQLite,
spans written, the bus, validation, the thread hops. Steps are timed between consecutive
``tool.completed`` events, so task start-up and shutdown are not counted.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.stats import intervals_between, run_step_benchmark
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
    return await intervals_between(
        container.kernel(), ToolCompleted, TaskRequest(task="benchmark"), tasks
    )


def main() -> None:
    run_step_benchmark(
        "react_step_overhead", "ReAct step overhead", measure, doc=__doc__, default_tasks=60
    )


if __name__ == "__main__":
    main()
