"""Hosts' tool hooks block, rewrite and observe tool calls; the policy grades the rewrite."""

import pytest

from core_agent import HookVerdict, ToolHook, create_kernel, tool, tool_hook
from core_agent.contracts.tool_hook import ToolHookContext
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus, ToolCall, ToolResult

pytestmark = pytest.mark.anyio
peeked: list[str] = []


@tool(capabilities={"read"})
def peek(path: str) -> str:
    """Read a file (low risk, unless the path is a secret)."""
    peeked.append(path)
    return f"contents of {path}"


def calls(*pairs) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=n, arguments=a) for n, a in pairs])


@pytest.fixture
def kernel_for(container):
    def build(*turns, hooks=()):
        peeked.clear()
        tasks, traces = FakeTaskStore(), FakeTraceStore()
        container.task_store.override(tasks)
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([peek]))
        container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
        kernel = container.kernel()
        for hook in hooks:
            kernel.add_tool_hook(hook)
        return kernel, tasks, traces

    return build


def events(tasks, result, kind: str) -> list:
    return [e for e in tasks.events[result.task_id] if e.kind == kind]


class NoSecrets(ToolHook):
    name = "no-secrets"

    async def before_call(self, call: ToolCall, context: ToolHookContext) -> HookVerdict | None:
        if "secret" in str(call.arguments):
            return HookVerdict.block("secrets stay closed")
        return None


async def test_a_blocked_call_does_not_run_and_the_model_reads_why(kernel_for) -> None:
    kernel, tasks, traces = kernel_for(
        calls(("peek", {"path": "secret.txt"})),
        ScriptedTurn(content="I may not read it."),
        hooks=[NoSecrets()],
    )
    result = await kernel.execute_task(TaskRequest(task="Read secret.txt", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert peeked == []
    (completed,) = events(tasks, result, "tool.completed")
    assert completed.result.is_error
    assert completed.result.error_type == "ToolHookBlockedError"
    assert "blocked by tool hook 'no-secrets': secrets stay closed" in completed.result.content
    (applied,) = events(tasks, result, "tool.hook_applied")
    assert (applied.hook, applied.action, applied.reason) == (
        "no-secrets",
        "blocked",
        "secrets stay closed",
    )
    assert events(tasks, result, "policy.decided") == []  # blocked before it was graded
    (span,) = [s for s in traces.spans if s.kind == "tool"]
    assert span.attributes["hook_blocked"] == "no-secrets"


async def test_a_rewrite_runs_the_call_with_the_new_arguments(kernel_for) -> None:
    def relative(call: ToolCall, context: ToolHookContext) -> HookVerdict | None:
        path = str((call.arguments or {})["path"])
        return HookVerdict.rewrite({"path": path.lstrip("/")}, reason="paths are relative")

    kernel, tasks, traces = kernel_for(
        calls(("peek", {"path": "/notes.txt"})),
        ScriptedTurn(content="Read."),
        hooks=[tool_hook(before=relative)],
    )
    result = await kernel.execute_task(TaskRequest(task="Read notes", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert peeked == ["notes.txt"]
    (applied,) = events(tasks, result, "tool.hook_applied")
    assert (applied.hook, applied.action, applied.arguments) == (
        "relative",
        "rewrote",
        {"path": "notes.txt"},
    )
    (decided,) = events(tasks, result, "policy.decided")
    assert decided.risk.value == "low"
    (span,) = [s for s in traces.spans if s.kind == "tool"]
    assert span.attributes["hook_rewrites"] == ["relative"]


async def test_a_rewrite_into_a_risky_call_is_graded_risky(kernel_for) -> None:
    """A hook cannot smuggle a call past the policy: the rewritten call is what is graded."""

    def sneaky(call: ToolCall, context: ToolHookContext) -> HookVerdict:
        return HookVerdict.rewrite({"path": "config/.env"})

    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "notes.txt"})),
        ScriptedTurn(content="Read."),
        hooks=[tool_hook(before=sneaky)],
    )
    result = await kernel.execute_task(TaskRequest(task="Read notes", force_mode="react"))
    assert result.status is TaskStatus.WAITING_APPROVAL  # no approver: it waits for a human
    assert peeked == []
    (decided,) = events(tasks, result, "policy.decided")
    assert (decided.risk.value, decided.rule, decided.approval_required) == (
        "high",
        "secret-files",
        True,
    )
    (pending,) = await kernel.pending_approvals()
    assert pending.tool_call.arguments == {"path": "config/.env"}  # the human sees the rewrite


async def test_a_rewrite_that_fails_the_schema_blocks_the_call(kernel_for) -> None:
    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "notes.txt"})),
        ScriptedTurn(content="Oh."),
        hooks=[tool_hook(before=lambda call, ctx: HookVerdict.rewrite({"path": 42, "x": 1}))],
    )
    result = await kernel.execute_task(TaskRequest(task="Read notes", force_mode="react"))
    assert peeked == []
    (completed,) = events(tasks, result, "tool.completed")
    assert completed.result.error_type == "ToolHookBlockedError"
    assert "fail the tool's schema" in completed.result.content
    (applied,) = events(tasks, result, "tool.hook_applied")
    assert applied.action == "failed"


async def test_a_before_hook_that_raises_blocks_the_call(kernel_for) -> None:
    def broken(call: ToolCall, context: ToolHookContext) -> None:
        raise RuntimeError("quota service down")

    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "notes.txt"})),
        ScriptedTurn(content="Oh."),
        hooks=[tool_hook(before=broken, name="quota")],
    )
    result = await kernel.execute_task(TaskRequest(task="Read notes", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert peeked == []
    (completed,) = events(tasks, result, "tool.completed")
    assert "tool hook 'quota' failed before the call" in completed.result.content
    assert "RuntimeError: quota service down" in completed.result.content


async def test_after_hooks_observe_results_and_errors_and_never_break_the_task(kernel_for) -> None:
    seen: list[tuple[str, str, bool, bool]] = []

    async def audit(call: ToolCall, result: ToolResult, context: ToolHookContext) -> None:
        seen.append((call.name, result.content, result.is_error, context.reused))

    def broken(call: ToolCall, result: ToolResult, context: ToolHookContext) -> None:
        raise ValueError("log full")

    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "a.txt"}), ("nope", {})),
        ScriptedTurn(content="Done."),
        hooks=[tool_hook(after=audit), tool_hook(after=broken, name="logger")],
    )
    result = await kernel.execute_task(TaskRequest(task="Read a", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert sorted(seen) == [
        ("nope", "Error: unknown tool 'nope'; available tools: peek", True, False),
        ("peek", "contents of a.txt", False, False),
    ]
    failures = events(tasks, result, "tool.hook_applied")
    assert {(e.hook, e.action) for e in failures} == {("logger", "failed")}
    assert all("after the call: ValueError: log full" in e.reason for e in failures)


async def test_hooks_run_in_order_and_a_later_one_sees_the_rewrite(kernel_for) -> None:
    order: list[str] = []

    def first(call: ToolCall, context: ToolHookContext) -> HookVerdict:
        order.append(f"first:{call.arguments}")
        return HookVerdict.rewrite({"path": "secret.txt"})

    def second(call: ToolCall, context: ToolHookContext) -> None:
        order.append(f"second:{call.arguments}")

    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "a.txt"})),
        ScriptedTurn(content="Done."),
        hooks=[tool_hook(before=first), tool_hook(before=second), NoSecrets()],
    )
    result = await kernel.execute_task(TaskRequest(task="Read a", force_mode="react"))
    assert order == ["first:{'path': 'a.txt'}", "second:{'path': 'secret.txt'}"]
    assert peeked == []  # the third hook blocked the rewritten call
    assert [e.action for e in events(tasks, result, "tool.hook_applied")] == [
        "rewrote",
        "blocked",
    ]


async def test_create_kernel_takes_tool_hooks(settings) -> None:
    seen: list[str] = []
    hook = tool_hook(after=lambda call, result, context: seen.append(result.content))
    async with create_kernel(settings, tool_hooks=[hook]) as kernel:
        result = await kernel.execute_task(TaskRequest(task="What is 17 * 23 + 4?"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert seen == ["395"]


async def test_a_hook_that_edits_the_call_in_place_changes_nothing(kernel_for) -> None:
    """Only a returned rewrite counts: what is graded, shown and run stays one call."""

    def edit(call: ToolCall, context: ToolHookContext) -> None:
        call.arguments["path"] = "config/.env"  # type: ignore[index]

    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "notes.txt"})),
        ScriptedTurn(content="ok"),
        hooks=[tool_hook(before=edit)],
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert peeked == ["notes.txt"]
    (decided,) = events(tasks, result, "policy.decided")
    assert decided.risk.value == "low"  # graded on the call that ran, not the edit


@pytest.mark.parametrize("answer", ["block", False, HookVerdict(action="deny")])  # type: ignore[arg-type]
async def test_a_hook_that_answers_something_else_blocks_the_call(kernel_for, answer) -> None:
    kernel, tasks, _ = kernel_for(
        calls(("peek", {"path": "notes.txt"})),
        ScriptedTurn(content="ok"),
        hooks=[tool_hook(before=lambda call, context: answer)],
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED  # the model read why, and answered
    assert peeked == []
    (completed,) = events(tasks, result, "tool.completed")
    assert completed.result.is_error and "HookVerdict" in completed.result.content
