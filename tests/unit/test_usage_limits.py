"""Usage limits end a task ``failed`` with the reason, before the limit is crossed.

Driven end to end through the kernel with the scripted model, whose turns report fixed usage.
"""

import json

import anyio
import pytest
from dependency_injector import providers

from core_agent import tool
from core_agent.orchestration.react_executor import ReActExecutor
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    TaskRequest,
    TaskStatus,
    TokenUsage,
    UsageLimits,
)

pytestmark = pytest.mark.anyio

USAGE = TokenUsage(input_tokens=100, output_tokens=10, cost_usd=0.03)
"""What every scripted turn here reports."""


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(capabilities={"exec"})
async def launch(target: str) -> str:
    """Launch something (high risk: a human approves it)."""
    return f"launched {target}"


@tool
async def slow() -> str:
    """Take far longer than any limit here."""
    await anyio.sleep(3600)
    return "never"


def call(name: str, **arguments) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)], usage=USAGE)


def answer(text: str = "Done.") -> ScriptedTurn:
    return ScriptedTurn(content=text, usage=USAGE)


@pytest.fixture
def build(container):
    def build(*turns: ScriptedTurn, conversations=None, **settings):
        if settings:
            container.settings.override(container.settings().model_copy(update=settings))
        tasks, traces = FakeTaskStore(), FakeTraceStore()
        container.task_store.override(tasks)
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([lookup, slow, launch]))
        gateway = (
            ScriptedLLMGateway(conversations=conversations)
            if conversations
            else ScriptedLLMGateway(list(turns))
        )
        container.llm_gateway.override(gateway)
        return container.kernel(), tasks, traces

    return build


def kinds(tasks, result) -> list[str]:
    return [e.kind for e in tasks.events[result.task_id]]


def failed_with(result, limit: str) -> None:
    assert result.status is TaskStatus.FAILED, result
    assert result.error_type == "UsageLimitExceededError"
    assert f"usage limit {limit}" in (result.error or "")


async def test_input_tokens_stop_the_task_before_a_call_would_pass_them(build) -> None:
    kernel, tasks, traces = build(call("lookup", key="a"), call("lookup", key="b"), answer())
    result = await kernel.execute_task(
        TaskRequest(task="Look two keys up.", limits=UsageLimits(input_tokens=250))
    )
    failed_with(result, "input_tokens")
    # Two calls used 200; a third prompt of about 100 more would pass 250: not made.
    assert kinds(tasks, result).count("llm.completed") == 2
    assert result.usage.input_tokens == 200
    assert "200 used" in (result.error or "") and "about 100" in (result.error or "")
    run = next(s for s in traces.spans if s.kind == "run")
    assert run.attributes["usage_limit"] == "task:input_tokens"
    assert run.attributes["limits"] == {"input_tokens": 250}


async def test_output_tokens_reached_stop_the_task_before_the_next_call(build) -> None:
    kernel, tasks, _ = build(call("lookup", key="a"), call("lookup", key="b"), answer())
    result = await kernel.execute_task(
        TaskRequest(task="Look two keys up.", limits=UsageLimits(output_tokens=20))
    )
    failed_with(result, "output_tokens")
    assert result.usage.output_tokens == 20
    assert kinds(tasks, result).count("llm.completed") == 2
    assert kinds(tasks, result).count("tool.completed") == 2


async def test_a_call_that_passes_the_cost_limit_runs_nothing_after_it(build) -> None:
    kernel, tasks, _ = build(call("lookup", key="a"), call("lookup", key="b"), answer())
    result = await kernel.execute_task(
        TaskRequest(task="Look two keys up.", limits=UsageLimits(cost_usd=0.05))
    )
    failed_with(result, "cost_usd")
    # The second call's answer brought the cost to $0.06: its tool call was not run.
    assert kinds(tasks, result).count("tool.completed") == 1
    assert result.usage.cost_usd == pytest.approx(0.06)
    assert "$0.0600" in (result.error or "") and "$0.0500" in (result.error or "")


async def test_total_tokens_default_from_the_settings(build) -> None:
    kernel, tasks, _ = build(
        call("lookup", key="a"), call("lookup", key="b"), answer(), limit_total_tokens=300
    )
    result = await kernel.execute_task(TaskRequest(task="Look two keys up."))
    failed_with(result, "total_tokens")
    assert kinds(tasks, result).count("llm.completed") == 2  # 220 used + about 100 > 300


async def test_tool_calls_stop_the_task_before_a_call_past_the_limit(build) -> None:
    kernel, tasks, _ = build(call("lookup", key="a"), call("lookup", key="b"), answer())
    result = await kernel.execute_task(
        TaskRequest(task="Look two keys up.", limits=UsageLimits(tool_calls=1))
    )
    failed_with(result, "tool_calls")
    assert kinds(tasks, result).count("tool.started") == 1
    assert "1 made or under way and the model asked for 1 more" in (result.error or "")


async def test_a_turn_whose_calls_would_pass_the_limit_runs_none_of_them(build) -> None:
    both = ScriptedTurn(
        tool_calls=[
            ScriptedToolCall(name="lookup", arguments={"key": "a"}),
            ScriptedToolCall(name="lookup", arguments={"key": "b"}),
        ],
        usage=USAGE,
    )
    kernel, tasks, _ = build(both, answer(), limit_tool_calls=1)
    result = await kernel.execute_task(TaskRequest(task="Look two keys up."))
    failed_with(result, "tool_calls")
    assert "tool.started" not in kinds(tasks, result)


async def test_a_request_limit_overrides_the_default_one_by_one(build) -> None:
    kernel, _, _ = build(call("lookup", key="a"), answer(), limit_tool_calls=0, limit_cost_usd=1.0)
    result = await kernel.execute_task(
        TaskRequest(task="Look a key up.", limits=UsageLimits(tool_calls=5))
    )
    assert result.status is TaskStatus.SUCCEEDED, result.error


async def test_wall_time_fails_the_task_it_does_not_cancel_it(build) -> None:
    kernel, tasks, _ = build(call("slow"), answer())
    result = await kernel.execute_task(
        TaskRequest(task="Wait for it.", limits=UsageLimits(wall_time_s=0.5))
    )
    failed_with(result, "wall_time_s")
    assert "still going after 0.5 s" in (result.error or "")
    assert "task.canceled" not in kinds(tasks, result)
    assert kinds(tasks, result)[-1] == "task.failed"


@pytest.mark.parametrize("durable", [True, False], ids=["suspending", "asking-in-the-run"])
async def test_the_time_an_approver_takes_does_not_count_as_wall_time(
    build, container, durable
) -> None:
    """Durable runs suspend while the approver is asked; a run without checkpoints asks in
    the run, with its clock stopped."""

    async def slow_human(request: ApprovalRequest) -> ApprovalDecision:
        await anyio.sleep(0.8)
        return ApprovalDecision(request_id=request.request_id, approved=True, decided_by="me")

    kernel, tasks, _ = build(call("launch", target="rocket"), answer("Launched."))
    if not durable:
        container.react_executor.override(
            providers.Object(ReActExecutor(loop=container.react_loop(), checkpoints=None))
        )
        container.kernel.reset()
        kernel = container.kernel()
    kernel.set_approval_callback(slow_human)
    result = await kernel.execute_task(
        TaskRequest(task="Launch it.", force_mode="react", limits=UsageLimits(wall_time_s=0.5))
    )
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert kinds(tasks, result).count("approval.resolved") == 1


async def test_a_session_limit_counts_the_sessions_earlier_tasks(build) -> None:
    kernel, tasks, _ = build(answer("First."), answer("Second."), session_limit_input_tokens=100)
    first = await kernel.execute_task(TaskRequest(task="One.", session_id="s1"))
    assert first.status is TaskStatus.SUCCEEDED and first.usage.input_tokens == 100
    elsewhere = await kernel.execute_task(TaskRequest(task="Other.", session_id="s2"))
    assert elsewhere.status is TaskStatus.SUCCEEDED  # another session has its own budget
    second = await kernel.execute_task(TaskRequest(task="Two.", session_id="s1"))
    assert second.status is TaskStatus.FAILED
    assert second.error_type == "UsageLimitExceededError"
    assert "session usage limit input_tokens" in (second.error or "")
    assert "llm.completed" not in kinds(tasks, second)  # stopped before its first call


def plan_json(*steps: str) -> str:
    return json.dumps(
        {
            "steps": [
                {"id": s, "goal": f"do {s}", "depends_on": [], "success_criterion": "done"}
                for s in steps
            ]
        }
    )


async def test_plan_steps_share_one_task_budget_and_do_not_fall_back(build) -> None:
    def conv(match: str, *turns: ScriptedTurn) -> ScriptedConversation:
        return ScriptedConversation(match=match, turns=list(turns))

    kernel, tasks, _ = build(
        conversations=[
            conv(r"^Plan this task:", answer(plan_json("a", "b"))),
            conv(r"^Your step \(a\)", call("lookup", key="a"), answer("a done")),
            conv(r"^Your step \(b\)", call("lookup", key="b"), answer("b done")),
            conv(r"^Write the final answer", answer("Both.")),
            conv(r"^Look", call("lookup", key="a"), answer("fallback")),
        ]
    )
    result = await kernel.execute_task(
        TaskRequest(
            task="Look up a and b.", force_mode="plan_execute", limits=UsageLimits(tool_calls=1)
        )
    )
    failed_with(result, "tool_calls")
    assert kinds(tasks, result).count("tool.started") == 1
    assert "task.strategy_fallback" not in kinds(tasks, result)
    assert "plan.created" in kinds(tasks, result)
