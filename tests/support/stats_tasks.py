"""Seven tasks with known outcomes, for the tests of ``metrics`` and ``core-agent stats``.

Run once per test module (``run_tasks``) on real SQLite with the scripted model: two in
session ``alpha`` (a tool that works, a tool that fails), then, after a recorded moment,
four whose risky call waits for a human (approved, denied, left waiting until the task is
canceled, and refused by the kernel when the host's approver gives no decision) and one
whose model call fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import Span
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    TaskRequest,
    TaskStatus,
    TokenUsage,
)

MODEL = "scripted/stats"
TURN_USAGE = TokenUsage(input_tokens=100, output_tokens=10, cost_usd=0.001)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def flaky() -> str:
    """A tool that always fails."""
    raise RuntimeError("the flaky service is down")


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (exec: a human is asked first)."""
    return f"launched {target}"


def conversation(match: str, *turns: ScriptedTurn) -> ScriptedConversation:
    return ScriptedConversation(match=match, on="last", turns=list(turns))


def call(name: str, **arguments: object) -> ScriptedTurn:
    tool_call = ScriptedToolCall(name=name, arguments=arguments)
    return ScriptedTurn(tool_calls=[tool_call], usage=TURN_USAGE)


ANSWER = ScriptedTurn(content="done", usage=TURN_USAGE)
SCRIPT = [
    conversation("^add", call("add", a=2, b=3), ANSWER),
    conversation("^flaky", call("flaky"), ANSWER),
    conversation("^launch", call("launch", target="rocket"), ANSWER),
    conversation("^broken", ScriptedTurn(error=ScriptedError(message="overloaded"))),
]


@dataclass
class StatsData:
    settings: AgentSettings
    mark: datetime
    """A moment after the two tasks of session ``alpha`` and before the others."""
    spans: dict[str, list[Span]]
    waits_ms: list[float]
    task_ids: list[str]


def kernel_for(settings: AgentSettings) -> AgentKernel:
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(ScriptedLLMGateway(conversations=SCRIPT, model_name=MODEL))
    container.tool_registry.override(ToolRegistry([add, flaky, launch]))
    return container.kernel()


async def run_tasks(settings: AgentSettings) -> StatsData:
    kernel = kernel_for(settings)
    ids: list[str] = []

    async def run(text: str, **fields: object) -> str:
        result = await kernel.execute_task(TaskRequest(task=text, force_mode="react", **fields))
        ids.append(result.task_id)
        return result.pending_approval or ""

    def decision(request_id: str, approved: bool) -> ApprovalDecision:
        return ApprovalDecision(request_id=request_id, approved=approved, decided_by="test")

    async with kernel:
        await run("add 2 and 3", session_id="alpha")
        await run("flaky service call", session_id="alpha")
        mark = datetime.now(UTC)
        approve = await run("launch and approve")
        deny = await run("launch and deny")
        abandon = await run("launch and abandon")
        for request_id, approved in ((approve, True), (deny, False)):
            result = await kernel.resolve_approval(request_id, decision(request_id, approved))
            assert result.status is TaskStatus.SUCCEEDED, result.error
        await kernel.cancel_task(ids[-1], "nobody came")
        assert (await kernel.get_task(ids[-1])).status is TaskStatus.CANCELED
        assert abandon
        kernel.set_approval_callback(lambda request: None)  # not a decision: the kernel denies
        await run("launch with a silent approver")
        kernel.set_approval_callback(None)
        await run("broken model")
        spans = {task_id: await kernel.task_spans(task_id) for task_id in ids}
        waits = []
        for task_id in ids:
            events = await kernel.task_events(task_id)
            asked = {
                e.request.request_id: e.request.created_at
                for e in events
                if isinstance(e, ApprovalRequested)
            }
            waits.extend(
                (e.occurred_at - asked[e.decision.request_id]).total_seconds() * 1000
                for e in events
                if isinstance(e, ApprovalResolved)
            )
    statuses = [(await kernel_status(settings, task_id)) for task_id in ids]
    assert statuses == [
        TaskStatus.SUCCEEDED,
        TaskStatus.SUCCEEDED,
        TaskStatus.SUCCEEDED,
        TaskStatus.SUCCEEDED,
        TaskStatus.CANCELED,
        TaskStatus.SUCCEEDED,
        TaskStatus.FAILED,
    ]
    return StatsData(settings, mark, spans, waits, ids)


async def kernel_status(settings: AgentSettings, task_id: str) -> TaskStatus:
    async with kernel_for(settings) as kernel:
        return (await kernel.get_task(task_id)).status
