"""The concurrency bounds a user sets hold: tool calls of one turn, and plan steps.

Each call of ``hold`` counts itself in and waits for the test to let it go. Once every task of
the run is blocked (nothing else could start), the count is how many calls run at once: with
the bound in place exactly the bound, without it every call of the turn or plan. No timing is
involved: the test waits for the event loop to go quiet, not for a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from core_agent import AgentKernel, tool
from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import TaskRequest, TaskResult, TaskStatus

pytestmark = pytest.mark.anyio

CALLS = 5


@dataclass
class Gauge:
    """How many ``hold`` calls are inside right now, and the most there ever were."""

    active: int = 0
    peak: int = 0
    arrived: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)


gauge = Gauge()


@tool
async def hold(n: int) -> str:
    """Stay busy until released.

    Args:
        n: Which call this is.
    """
    gauge.active += 1
    gauge.peak = max(gauge.peak, gauge.active)
    gauge.arrived.set()
    await gauge.release.wait()
    gauge.active -= 1
    return f"held {n}"


def kernel_for(tmp_path: Path, gateway: ScriptedLLMGateway) -> AgentKernel:
    """A kernel with the settings the environment gives (the user's variables)."""
    global gauge
    gauge = Gauge()
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data", model_max_retries=0))
    container.task_store.override(FakeTaskStore())
    container.trace_store.override(FakeTraceStore())
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    container.tool_registry.override(ToolRegistry([hold]))
    container.llm_gateway.override(gateway)
    return container.kernel()


async def at_once_then_finish(kernel: AgentKernel, request: TaskRequest) -> tuple[int, TaskResult]:
    """Run ``request``; how many ``hold`` calls were inside once the run could go no further."""
    outcome: list[TaskResult] = []

    async def run() -> None:
        outcome.append(await kernel.execute_task(request))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await gauge.arrived.wait()
        # Every call that could start has started and is waiting: the bound, or all of them.
        await wait_all_tasks_blocked()
        at_once = gauge.active
        gauge.release.set()
    return at_once, outcome[0]


async def test_max_parallel_tools_bounds_the_calls_of_one_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MAX_PARALLEL_TOOLS", "2")
    turn = ScriptedTurn(
        tool_calls=[ScriptedToolCall(name="hold", arguments={"n": n}) for n in range(CALLS)]
    )
    kernel = kernel_for(tmp_path, ScriptedLLMGateway([turn, ScriptedTurn(content="done")]))
    at_once, result = await at_once_then_finish(
        kernel, TaskRequest(task="hold five", force_mode="react")
    )
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert at_once == 2
    assert gauge.peak == 2  # never more, and the turn did use its two slots
    events = await kernel.task_events(result.task_id)
    completed = [e.result.content for e in events if e.kind == "tool.completed"]
    assert sorted(completed) == sorted(f"held {n}" for n in range(CALLS))


async def test_plan_max_parallel_steps_bounds_the_steps_that_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_PLAN_MAX_PARALLEL_STEPS", "2")
    monkeypatch.setenv("AGENT_PLAN_MAX_STEPS", str(CALLS))
    steps = [f"s{n}" for n in range(CALLS)]
    plan = {
        "steps": [
            {
                "id": step,
                "goal": f"do {step}",
                "depends_on": [],
                "tool_hints": ["hold"],
                "success_criterion": "held",
            }
            for step in steps
        ]
    }
    conversations = [
        ScriptedConversation(
            match=r"^Plan this task:", turns=[ScriptedTurn(content=json.dumps(plan))]
        ),
        *(
            ScriptedConversation(
                match=rf"^Your step \({step}\)",
                turns=[
                    ScriptedTurn(tool_calls=[ScriptedToolCall(name="hold", arguments={"n": n})]),
                    ScriptedTurn(content=f"{step} held"),
                ],
            )
            for n, step in enumerate(steps)
        ),
        ScriptedConversation(
            match=r"^Write the final answer", turns=[ScriptedTurn(content="all held")]
        ),
    ]
    kernel = kernel_for(tmp_path, ScriptedLLMGateway(conversations=conversations))
    at_once, result = await at_once_then_finish(
        kernel, TaskRequest(task="hold five", force_mode="plan_execute")
    )
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "all held"
    assert at_once == 2
    assert gauge.peak == 2
    events = await kernel.task_events(result.task_id)
    assert [e.kind for e in events].count("plan.step_completed") == CALLS
