"""Policy decisions, refusals and human approvals around every tool call."""

import anyio
import pytest

from core_agent import tool
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio
launched: list[str] = []


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (high risk: exec)."""
    launched.append(target)
    return f"launched {target}"


@tool(capabilities={"read"})
def peek(name: str) -> str:
    """Read something (low risk)."""
    return f"contents of {name}"


def calls(*pairs) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=n, arguments=a) for n, a in pairs])


@pytest.fixture
def kernel_for(container):
    def build(*turns, callback=None, conversations=None):
        launched.clear()
        tasks, traces = FakeTaskStore(), FakeTraceStore()
        container.task_store.override(tasks)
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([launch, peek]))
        if conversations is not None:
            container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations))
        else:
            container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
        kernel = container.kernel()
        kernel.set_approval_callback(callback)
        return kernel, tasks, traces

    return build


def results(tasks, task_id):
    return [e.result for e in tasks.events[task_id] if e.kind == "tool.completed"]


async def test_every_call_is_graded_and_traced_with_its_rule(kernel_for) -> None:
    kernel, tasks, traces = kernel_for(calls(("peek", {"name": "a"})), ScriptedTurn(content="ok"))
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    (decided,) = [e for e in tasks.events[result.task_id] if e.kind == "policy.decided"]
    assert (decided.tool, decided.risk.value, decided.rule) == (
        "peek",
        "low",
        "default:capabilities(read)",
    )
    (span,) = [s for s in traces.spans if s.kind == "policy"]
    assert span.attributes["rule"] == "default:capabilities(read)"


async def test_without_an_approver_the_task_suspends_and_resumes_on_a_decision(kernel_for) -> None:
    kernel, tasks, _ = kernel_for(
        calls(("peek", {"name": "a"}), ("launch", {"target": "rocket"})),
        ScriptedTurn(content="launched it"),
    )
    waiting = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    assert launched == []
    (pending,) = await kernel.pending_approvals()
    assert pending.request_id == waiting.pending_approval
    assert pending.tool_call.name == "launch" and pending.call_hash

    done = await kernel.resolve_approval(
        pending.request_id, ApprovalDecision(request_id=pending.request_id, approved=True)
    )
    assert done.status is TaskStatus.SUCCEEDED and done.output == "launched it"
    assert launched == ["rocket"]
    # The call that had finished before the suspension was not run again.
    peeks = [
        e
        for e in tasks.events[waiting.task_id]
        if e.kind == "tool.completed" and e.result.name == "peek"
    ]
    assert len(peeks) == 1


async def test_a_denied_suspended_call_is_reported_to_the_model(kernel_for) -> None:
    kernel, tasks, _ = kernel_for(
        calls(("launch", {"target": "rocket"})), ScriptedTurn(content="ok, not launching")
    )
    waiting = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    done = await kernel.resolve_approval(
        waiting.pending_approval,
        ApprovalDecision(
            request_id=waiting.pending_approval, approved=False, reason="too dangerous"
        ),
    )
    assert done.status is TaskStatus.SUCCEEDED and done.output == "ok, not launching"
    assert launched == []
    refused = [e.result for e in tasks.events[waiting.task_id] if e.kind == "tool.completed"]
    assert refused[-1].error_type == "ApprovalDeniedError"
    assert "too dangerous" in refused[-1].content


async def test_an_approved_call_runs_and_the_task_waited_while_asked(kernel_for) -> None:
    seen_status = []

    async def approve(request):
        seen_status.append((await kernel.get_task(request.task_id)).status)
        assert request.tool_call.arguments == {"target": "rocket"}
        assert request.risk.value == "high" and request.rule == "default:capabilities(exec)"
        return ApprovalDecision(request_id=request.request_id, approved=True)

    kernel, tasks, traces = kernel_for(
        calls(("launch", {"target": "rocket"})), ScriptedTurn(content="done"), callback=approve
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert launched == ["rocket"]
    assert seen_status == [TaskStatus.WAITING_APPROVAL]
    kinds = [e.kind for e in tasks.events[result.task_id]]
    assert (
        kinds.index("approval.requested")
        < kinds.index("task.waiting_approval")
        < kinds.index("approval.resolved")
        < kinds.index("tool.completed")
    )
    assert any(s.kind == "approval" and s.attributes["approved"] for s in traces.spans)


async def test_a_call_changed_after_approval_is_refused(kernel_for, container) -> None:
    def approve_then_tamper(request):
        # Someone edits the suspended call (in the store) after it was shown and approved.
        saved = checkpoints.saved[(request.task_id, "react")]
        saved["pending_calls"][0]["arguments"]["target"] = "the neighbours"
        return ApprovalDecision(request_id=request.request_id, approved=True)

    kernel, tasks, _ = kernel_for(
        calls(("launch", {"target": "rocket"})),
        ScriptedTurn(content="x"),
        callback=approve_then_tamper,
    )
    checkpoints = container.checkpoint_store()
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert launched == []
    (refused,) = results(tasks, result.task_id)
    assert "arguments changed after approval" in refused.content


async def test_concurrent_requests_each_get_their_own_decision(kernel_for) -> None:
    arrived = []
    both_waiting = anyio.Event()

    async def decide(request):
        arrived.append(request)
        if len(arrived) == 2:
            both_waiting.set()
        await both_waiting.wait()  # answer only once both are pending
        approved = request.tool_call.arguments["target"] == "alpha"
        return ApprovalDecision(
            request_id=request.request_id, approved=approved, reason="alpha only"
        )

    kernel, tasks, _ = kernel_for(
        calls(("launch", {"target": "alpha"}), ("launch", {"target": "beta"})),
        ScriptedTurn(content="done"),
        callback=decide,
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert launched == ["alpha"]
    by_call = {r.call_id: r for r in results(tasks, result.task_id)}
    assert not by_call["call_1_1"].is_error and by_call["call_1_2"].is_error
    assert len({r.request_id for r in arrived}) == 2


async def test_a_timeout_denies(kernel_for, container) -> None:
    container.settings.override(
        container.settings().model_copy(update={"approval_timeout_s": 0.05})
    )

    async def never(request):
        await anyio.sleep(3600)

    kernel, tasks, _ = kernel_for(
        calls(("launch", {"target": "x"})), ScriptedTurn(content="k"), callback=never
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert launched == []
    assert "no decision within 0.05 s" in results(tasks, result.task_id)[0].content
    assert result.status is TaskStatus.SUCCEEDED  # the model was told, and answered


def approve_for(scope):
    """An approver that approves every request with ``scope``; what it was asked about."""
    asked = []

    def approve(request):
        asked.append(request.tool_call.arguments["target"])
        return ApprovalDecision(request_id=request.request_id, approved=True, scope=scope)

    return approve, asked


@pytest.mark.parametrize("scope", ["task", "session"])
async def test_a_scoped_approval_covers_the_same_call_and_asks_about_another(
    kernel_for, scope
) -> None:
    approve, asked = approve_for(scope)
    kernel, _, _ = kernel_for(
        # The read taints the task first, so the approval is given knowing it.
        calls(("peek", {"name": "a"})),
        calls(("launch", {"target": "one"})),
        calls(("launch", {"target": "one"})),
        calls(("launch", {"target": "two"})),
        ScriptedTurn(content="ok"),
        callback=approve,
    )
    await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert launched == ["one", "one", "two"]
    assert asked == ["one", "two"]


async def test_a_session_approval_covers_the_same_call_in_the_next_task(kernel_for) -> None:
    approve, asked = approve_for("session")
    turns = [
        calls(("peek", {"name": "a"})),
        calls(("launch", {"target": "one"})),
        calls(("launch", {"target": "two"})),
        ScriptedTurn(content="ok"),
    ]
    kernel, _, _ = kernel_for(
        callback=approve,
        conversations=[
            ScriptedConversation(match="first", on="last", turns=[turns[0], turns[1], turns[3]]),
            ScriptedConversation(match="second", on="last", turns=turns),
        ],
    )
    first = await kernel.execute_task(TaskRequest(task="first", force_mode="react"))
    await kernel.execute_task(
        TaskRequest(task="second", session_id=first.session_id, force_mode="react")
    )
    assert launched == ["one", "one", "two"]
    assert asked == ["one", "two"]


async def test_a_scoped_approval_given_before_taint_does_not_cover_the_call_after(
    kernel_for,
) -> None:
    # The first launch's output is untrusted: what the model asks next may be injected.
    approve, asked = approve_for("task")
    kernel, tasks, _ = kernel_for(
        calls(("launch", {"target": "one"})),
        calls(("launch", {"target": "one"})),
        ScriptedTurn(content="ok"),
        callback=approve,
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert launched == ["one", "one"]
    assert asked == ["one", "one"]
    decided = [e.tainted for e in tasks.events[result.task_id] if e.kind == "policy.decided"]
    assert decided[0] is False and decided[-1] is True


async def test_a_scoped_decision_on_a_suspended_call_covers_the_same_call_once_resumed(
    kernel_for,
) -> None:
    kernel, _, _ = kernel_for(
        calls(("peek", {"name": "a"})),
        calls(("launch", {"target": "one"})),
        calls(("launch", {"target": "one"})),
        calls(("launch", {"target": "two"})),
        ScriptedTurn(content="ok"),
    )
    waiting = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    request_id = waiting.pending_approval
    waiting = await kernel.resolve_approval(
        request_id, ApprovalDecision(request_id=request_id, approved=True, scope="task")
    )
    assert launched == ["one", "one"]
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    (pending,) = await kernel.pending_approvals()
    assert pending.tool_call.arguments == {"target": "two"}


async def test_a_suspension_is_traced_as_a_wait_not_a_failure(kernel_for) -> None:
    kernel, _, traces = kernel_for(calls(("launch", {"target": "x"})), ScriptedTurn(content="k"))
    await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    suspended = [s for s in traces.spans if "suspended" in s.attributes]
    assert {s.kind for s in suspended} == {"run", "tool"}
    assert all(s.status == "ok" for s in suspended)
