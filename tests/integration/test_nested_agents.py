"""Nested agents on real SQLite: an agent called as a tool runs as a child task of its caller.

Three levels: the root task calls ``planner`` (its child), which calls ``worker`` (the
grandchild), which calls a risky ``deploy`` tool. The scripted model answers each task by its
text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.tool import ToolContext
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.kernel.nested_agents import Agent
from core_agent.tooling.function_tool import FunctionTool, tool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import (
    AgentHandoff,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    TaskRequest,
    TaskStatus,
    TaskWaitingApproval,
    TokenUsage,
)

pytestmark = pytest.mark.anyio

PLANNER = Agent("planner", "Plans a release.", tools=("worker",))
WORKER = Agent("worker", "Does the release work.", tools=("deploy", "block"))


def call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


def conversation(match: str, *turns: ScriptedTurn) -> ScriptedConversation:
    return ScriptedConversation(match=match, turns=list(turns))


def said(text: str) -> ScriptedTurn:
    return ScriptedTurn(content=text, usage=TokenUsage(input_tokens=10, output_tokens=5))


def script(grandchild_tool: str) -> list[ScriptedConversation]:
    return [
        conversation("^Ship it", call("planner", task="Plan it"), said("Root: shipped.")),
        conversation("^Plan it", call("worker", task="Do it"), said("Planner: planned.")),
        conversation("^Do it", call(grandchild_tool), said("Worker: deployed.")),
    ]


def kernel_on(
    data_dir: Path,
    tools: list[FunctionTool],
    conversations: list[ScriptedConversation],
    **settings: Any,
) -> AgentKernel:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": data_dir,
                "workspace_roots": (data_dir,),
                "cancel_check_s": 0.05,
                "recovery": "off",
                **settings,
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations))
    container.tool_registry.override(ToolRegistry(tools))
    kernel: AgentKernel = container.kernel()
    kernel.agent_as_tool(WORKER)
    kernel.agent_as_tool(PLANNER)
    return kernel


@tool(capabilities={"exec"})  # graded high: needs a human
def deploy() -> str:
    """Deploy the release."""
    return "deployed v2"


@tool
def block() -> str:
    """Not called in this test."""
    return "unused"


async def test_two_levels_deep_one_stream_in_order_and_the_grandchilds_approval_reaches_the_host(
    tmp_path: Path,
) -> None:
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(request_id=request.request_id, approved=True)

    kernel = kernel_on(tmp_path, [deploy, block], script("deploy"))
    kernel.set_approval_callback(approve)
    async with kernel:
        events = [
            e async for e in kernel.stream_task(TaskRequest(task="Ship it", tools=("planner",)))
        ]
        root = events[0].task_id
        assert events[-1].kind == "task.succeeded" and events[-1].task_id == root
        # One stream, three tasks, each at its depth.
        depth_of = {e.task_id: e.depth for e in events}
        assert sorted(depth_of.values()) == [0, 1, 2]
        child = next(t for t, d in depth_of.items() if d == 1)
        grandchild = next(t for t, d in depth_of.items() if d == 2)
        assert all(e.depth == depth_of[e.task_id] for e in events)
        # Each task's events in order, and nested where they happen.
        for task_id in depth_of:
            seqs = [e.seq for e in events if e.task_id == task_id]
            assert seqs == sorted(seqs)
        kinds = [(e.depth, e.kind) for e in events]
        handoff = kinds.index((0, "agent.handoff"))
        assert kinds.index((1, "task.queued")) == handoff + 1
        assert kinds.index((1, "agent.handoff")) < kinds.index((2, "task.queued"))
        assert kinds.index((2, "task.succeeded")) < kinds.index((1, "tool.completed"))
        assert kinds.index((1, "task.succeeded")) < kinds.index((0, "tool.completed"))
        # The grandchild's approval was asked of this host, and is in the stream.
        (request,) = asked
        assert request.task_id == grandchild and request.tool_call is not None
        assert request.tool_call.name == "deploy"
        assert any(isinstance(e, ApprovalRequested) and e.depth == 2 for e in events)
        # The children are tasks of their own, linked to their parents.
        child_state = await kernel.get_task(child)
        grandchild_state = await kernel.get_task(grandchild)
        assert child_state.status is grandchild_state.status is TaskStatus.SUCCEEDED
        assert child_state.request.parent is not None
        assert child_state.request.parent.task_id == root
        assert child_state.request.parent.depth == 1
        assert grandchild_state.request.parent is not None
        assert grandchild_state.request.parent.task_id == child
        assert grandchild_state.request.parent.depth == 2
        tool_span = next(
            s for s in await kernel.task_spans(root) if s.kind == "tool" and s.name == "planner"
        )
        assert child_state.request.parent.span_id == tool_span.span_id
        handoffs = [e for e in events if isinstance(e, AgentHandoff)]
        assert [(h.agent, h.child_task_id, h.sub_task) for h in handoffs] == [
            ("planner", child, "Plan it"),
            ("worker", grandchild, "Do it"),
        ]
        # Usage rolls up: the root's includes its descendants'.
        root_state = await kernel.get_task(root)

        def own(task_id: str) -> int:
            return sum(
                e.usage.output_tokens
                for e in events
                if e.task_id == task_id and e.kind == "llm.completed"
            )

        assert grandchild_state.usage.output_tokens == own(grandchild) > 0
        assert child_state.usage.output_tokens == own(child) + own(grandchild)
        assert root_state.usage.output_tokens == own(root) + own(child) + own(grandchild)
        assert events[-1].output == "Root: shipped."


async def test_cancel_of_the_root_stops_the_child_and_the_grandchild(tmp_path: Path) -> None:
    started = anyio.Event()

    async def wait() -> str:
        """Wait for something that never comes."""
        started.set()
        await anyio.sleep(3600)
        return "never"

    kernel = kernel_on(tmp_path, [deploy, FunctionTool(wait, name="block")], script("block"))
    async with kernel:
        results = []

        async def run() -> None:
            request = TaskRequest(task="Ship it", tools=("planner",))
            results.append(await kernel.execute_task(request, task_id="root"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            await kernel.cancel_task("root", "the user stopped it")
        (result,) = results
        assert result.status is TaskStatus.CANCELED
        tasks = {t.task_id: t for t in await kernel.list_tasks()}
        assert len(tasks) == 3
        assert {t.status for t in tasks.values()} == {TaskStatus.CANCELED}
        deepest = next(
            t for t in tasks.values() if t.request.parent and t.request.parent.depth == 2
        )
        assert "its parent task root was canceled: the user stopped it" in (deepest.error or "")


async def test_a_call_beyond_the_depth_limit_is_a_tool_error_the_model_reads(
    tmp_path: Path,
) -> None:
    kernel = kernel_on(tmp_path, [deploy, block], script("deploy"), max_agent_depth=1)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Ship it", tools=("planner",)))
        assert result.status is TaskStatus.SUCCEEDED
        tasks = await kernel.list_tasks()
        assert len(tasks) == 2  # the root and the planner; the worker never ran
        (child,) = [t for t in tasks if t.request.parent is not None]
        completed = [
            e for e in await kernel.task_events(child.task_id) if e.kind == "tool.completed"
        ]
        (refused,) = completed
        assert refused.result.is_error
        assert "AGENT_MAX_AGENT_DEPTH=1" in refused.result.content


async def test_a_durable_approval_in_the_grandchild_holds_its_parents_until_answered(
    tmp_path: Path,
) -> None:
    kernel = kernel_on(tmp_path, [deploy, block], script("deploy"))
    async with kernel:
        requested = anyio.Event()
        kernel.event_bus.subscribe(TaskWaitingApproval, lambda _: requested.set())
        results = []

        async def run() -> None:
            request = TaskRequest(task="Ship it", tools=("planner",))
            results.append(await kernel.execute_task(request, task_id="root"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await requested.wait()
            (pending,) = await kernel.pending_approvals()
            waiting = await kernel.get_task(pending.task_id)
            assert waiting.status is TaskStatus.WAITING_APPROVAL
            assert waiting.request.parent is not None and waiting.request.parent.depth == 2
            assert (await kernel.get_task("root")).status is TaskStatus.RUNNING
            decision = ApprovalDecision(request_id=pending.request_id, approved=True)
            resolved = await kernel.resolve_approval(pending.request_id, decision)
            assert resolved.status is TaskStatus.SUCCEEDED
        (result,) = results
        assert result.status is TaskStatus.SUCCEEDED
        assert result.output == "Root: shipped."


async def test_a_parent_resumed_after_a_crash_resumes_its_child_instead_of_running_a_new_one(
    tmp_path: Path,
) -> None:
    started = anyio.Event()
    crashed = {"yes": False}

    @tool(idempotent=True, name="block")
    async def wait(ctx: ToolContext) -> str:
        """Wait for the world (the first time, forever)."""
        if not crashed["yes"]:
            started.set()
            await anyio.sleep(3600)
        return "done"

    first = kernel_on(tmp_path, [deploy, wait], script("block"))
    async with first, anyio.create_task_group() as group:

        async def run() -> None:
            request = TaskRequest(task="Ship it", tools=("planner",))
            await first.execute_task(request, task_id="root")

        group.start_soon(run)
        await started.wait()
        first.leave_runs()  # the process "dies": its tasks are left for recovery
        group.cancel_scope.cancel()
    assert {t.status for t in await first_tasks(tmp_path)} == {TaskStatus.RUNNING}
    crashed["yes"] = True
    second = kernel_on(tmp_path, [deploy, wait], script("block"), task_lease_s=3.0)
    async with second:
        result = await second.resume("root")
        assert result.status is TaskStatus.SUCCEEDED and result.output == "Root: shipped."
        tasks = await second.list_tasks()
        assert len(tasks) == 3  # the same child and grandchild, carried on
        assert {t.status for t in tasks} == {TaskStatus.SUCCEEDED}
        for task in tasks:
            kinds = [e.kind for e in await second.task_events(task.task_id)]
            assert kinds.count("task.queued") == 1
            assert "task.resumed" in kinds


async def first_tasks(data_dir: Path) -> list[Any]:
    kernel = kernel_on(data_dir, [deploy, block], [])
    async with kernel:
        return await kernel.list_tasks()


async def test_cancel_of_the_root_reaches_a_grandchild_waiting_for_a_human(tmp_path: Path) -> None:
    kernel = kernel_on(tmp_path, [deploy, block], script("deploy"))
    async with kernel:
        waiting = anyio.Event()
        kernel.event_bus.subscribe(TaskWaitingApproval, lambda _: waiting.set())
        results = []

        async def run() -> None:
            request = TaskRequest(task="Ship it", tools=("planner",))
            results.append(await kernel.execute_task(request, task_id="root"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await waiting.wait()
            await kernel.cancel_task("root", "not today")
        (result,) = results
        assert result.status is TaskStatus.CANCELED
        tasks = await kernel.list_tasks()
        assert len(tasks) == 3
        assert {t.status for t in tasks} == {TaskStatus.CANCELED}
        assert await kernel.pending_approvals() == []


async def test_a_cancel_while_the_host_leaves_its_runs_still_reaches_a_waiting_grandchild(
    tmp_path: Path,
) -> None:
    kernel = kernel_on(tmp_path, [deploy, block], script("deploy"))
    async with kernel:
        waiting = anyio.Event()
        kernel.event_bus.subscribe(TaskWaitingApproval, lambda _: waiting.set())

        async def run() -> None:
            await kernel.execute_task(
                TaskRequest(task="Ship it", tools=("planner",)), task_id="root"
            )

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await waiting.wait()
                kernel.leave_runs()  # the host shuts down, but cancels this task first
                await kernel.cancel_task("root", "not today")
        tasks = await kernel.list_tasks()
        assert {t.status for t in tasks} == {TaskStatus.CANCELED}
        assert await kernel.pending_approvals() == []
