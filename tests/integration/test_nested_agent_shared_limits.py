"""Children running at once share what their parent has left, live.

Each child is bounded at its start by what its parent has left; children that run at the
same time (a turn's agent calls, a team's members) must not each spend all of it. What any
of them spends counts against the parent's limits as it is spent, and a child stops, as a
task stops at its own limit, once the shared budget is gone, naming the parent's limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from core_agent.container import KernelContainer
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.kernel.agent_teams import MemberResult, Team
from core_agent.kernel.nested_agents import Agent
from core_agent.tooling.function_tool import tool
from core_agent.tooling.registry import ToolRegistry
from core_agent.workflows import Workflow, run_workflow
from core_agent.workflows.registry import forget
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import (
    ApprovalDecision,
    TaskCanceled,
    TaskFailed,
    TaskRequest,
    TaskState,
    TaskStatus,
    TaskSucceeded,
    TaskWaitingApproval,
    TokenUsage,
    UsageLimits,
)

pytestmark = pytest.mark.anyio

CALL = 100
"""The tokens every scripted model call reports."""


@tool
def tick() -> str:
    """Do a small thing."""
    return "ticked"


@tool(capabilities={"exec"})  # graded high: needs a human
def deploy() -> str:
    """Deploy the release."""
    return "deployed"


HOLDING = {"on": True, "reached": anyio.Event()}


@tool(idempotent=True)
async def hold() -> str:
    """Wait for the world (forever, while HOLDING is on)."""
    if HOLDING["on"]:
        HOLDING["reached"].set()
        await anyio.sleep(3600)
    return "held"


def calls(*tasks: str, name: str = "spender") -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedToolCall(name=name, arguments={"task": task}) for task in tasks],
        usage=TokenUsage(input_tokens=CALL, output_tokens=0),
    )


def ticking(match: str, ticks: int) -> ScriptedConversation:
    turns = [
        ScriptedTurn(
            tool_calls=[ScriptedToolCall(name="tick", arguments={})],
            usage=TokenUsage(input_tokens=CALL, output_tokens=0),
        )
        for _ in range(ticks)
    ]
    done = ScriptedTurn(content="spent", usage=TokenUsage(input_tokens=CALL, output_tokens=0))
    return ScriptedConversation(match=match, turns=[*turns, done])


def kernel_on(
    data_dir: Path, conversations: list[ScriptedConversation], **settings: Any
) -> AgentKernel:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": data_dir,
                "workspace_roots": (data_dir,),
                "recovery": "off",
                "model_max_retries": 0,
                **settings,
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations))
    container.tool_registry.override(ToolRegistry([tick, deploy, hold]))
    return container.kernel()


async def children_of(kernel: AgentKernel, parent: str) -> list[TaskState]:
    return [
        t
        for t in await kernel.list_tasks()
        if t.request.parent is not None and t.request.parent.task_id == parent
    ]


async def ticks_of(kernel: AgentKernel, task_id: str) -> int:
    return sum(
        1
        for e in await kernel.task_events(task_id)
        if e.kind == "tool.completed" and e.result.name == "tick" and not e.result.is_error
    )


def total(usage: TokenUsage) -> int:
    return usage.input_tokens + usage.output_tokens


async def test_agent_calls_of_one_turn_share_the_parents_token_limit(tmp_path: Path) -> None:
    kernel = kernel_on(
        tmp_path,
        [
            ScriptedConversation(
                match="^Budget",
                turns=[
                    calls("Spend a", "Spend b", "Spend c"),
                    ScriptedTurn(content="never", usage=TokenUsage(input_tokens=CALL)),
                ],
            ),
            # Alone, each child would spend 700, within the 900 the parent has left.
            ticking("^Spend", 6),
        ],
    )
    kernel.agent_as_tool(Agent("spender", "Spends tokens.", tools=("tick",)))
    async with kernel:
        request = TaskRequest(
            task="Budget", tools=("spender",), limits=UsageLimits(total_tokens=1000)
        )
        with anyio.fail_after(60):
            result = await kernel.execute_task(request, task_id="root")
        children = await children_of(kernel, "root")
        assert len(children) == 3
        spent = [total(c.usage) for c in children]
        # The limit holds across the three (2,200 without sharing): passed by at most the
        # model calls under way when it was reached, one per child.
        assert total(result.usage) <= 1000 + 3 * CALL
        # Counted once: the parent's own call plus what each child spent.
        assert total(result.usage) == CALL + sum(spent)
        stopped = [c for c in children if c.status is TaskStatus.FAILED]
        assert stopped
        for child in stopped:
            assert "parent task root usage limit total_tokens (1000)" in (child.error or "")
        assert result.status is TaskStatus.FAILED
        assert "task usage limit total_tokens (1000)" in (result.error or "")
        # The parent's model was told which children stopped and why.
        outcomes = [
            e.result for e in await kernel.task_events("root") if e.kind == "tool.completed"
        ]
        assert sum("parent task root usage limit" in r.content for r in outcomes) == len(stopped)


async def test_team_members_running_at_once_share_the_session_token_limit(
    tmp_path: Path,
) -> None:
    members = [
        Agent(f"m{n}", "Spends tokens.", tools=("tick",), task_template=f"As m{n}: {{task}}")
        for n in range(3)
    ]
    kernel = kernel_on(tmp_path, [ticking("^As m", 6)], session_limit_total_tokens=1000)
    seen: list[MemberResult] = []

    def combine(task: str, results: Any) -> str:
        seen.extend(results)
        return "; ".join(f"{r.agent}={r.status.value}" for r in results)

    team = Team("trio", "Three spenders.", members, aggregate=combine, max_concurrent=3)
    async with kernel:
        with anyio.fail_after(60):
            result = await kernel.run_team(team, "check", task_id="team")
        children = await children_of(kernel, "team")
        assert len(children) == 3
        spent = sum(total(c.usage) for c in children)
        assert total(result.usage) == spent  # counted once
        assert spent <= 1000 + 3 * CALL  # 2,100 without sharing
        failed = [r for r in seen if not r.succeeded]
        assert failed  # each member's failure is its own, reported to the aggregation
        for member in failed:
            assert "session of parent task team usage limit total_tokens (1000)" in (
                member.error or ""
            )
        assert result.status is TaskStatus.SUCCEEDED


async def test_agent_calls_of_one_turn_share_the_parents_tool_calls(tmp_path: Path) -> None:
    kernel = kernel_on(
        tmp_path,
        [
            ScriptedConversation(
                match="^Budget",
                turns=[calls("Tick a", "Tick b", "Tick c"), ScriptedTurn(content="Root: done.")],
            ),
            ticking("^Tick", 5),
        ],
    )
    kernel.agent_as_tool(Agent("spender", "Ticks.", tools=("tick",)))
    async with kernel:
        request = TaskRequest(task="Budget", tools=("spender",), limits=UsageLimits(tool_calls=6))
        with anyio.fail_after(60):
            result = await kernel.execute_task(request, task_id="root")
        children = await children_of(kernel, "root")
        assert len(children) == 3
        ticks = [await ticks_of(kernel, c.task_id) for c in children]
        # Six in all, the three agent calls included: three ticks between them (nine
        # without sharing), none over, since tool calls take their places before they run.
        assert sum(ticks) == 3
        assert {c.status for c in children} == {TaskStatus.FAILED}
        for child in children:
            assert "parent task root usage limit tool_calls (6)" in (child.error or "")
        assert result.status is TaskStatus.SUCCEEDED and result.output == "Root: done."


async def test_grandchildren_running_at_once_share_the_roots_token_limit(tmp_path: Path) -> None:
    kernel = kernel_on(
        tmp_path,
        [
            ScriptedConversation(
                match="^Budget",
                turns=[
                    calls("Delegate", name="boss"),
                    ScriptedTurn(content="never", usage=TokenUsage(input_tokens=CALL)),
                ],
            ),
            ScriptedConversation(
                match="^Delegate",
                turns=[
                    calls("Spend a", "Spend b", "Spend c"),
                    ScriptedTurn(content="never", usage=TokenUsage(input_tokens=CALL)),
                ],
            ),
            ticking("^Spend", 6),
        ],
    )
    kernel.agent_as_tool(Agent("spender", "Spends tokens.", tools=("tick",)))
    kernel.agent_as_tool(Agent("boss", "Hands out work.", tools=("spender",)))
    async with kernel:
        request = TaskRequest(task="Budget", tools=("boss",), limits=UsageLimits(total_tokens=1000))
        with anyio.fail_after(60):
            result = await kernel.execute_task(request, task_id="root")
        (boss,) = await children_of(kernel, "root")
        grandchildren = await children_of(kernel, boss.task_id)
        assert len(grandchildren) == 3
        spent = sum(total(c.usage) for c in grandchildren)
        # Counted once per level; within the root's limit (2,300 without sharing).
        assert total(boss.usage) == CALL + spent
        assert total(result.usage) == CALL + total(boss.usage)
        assert total(result.usage) <= 1000 + 3 * CALL
        stopped = [c for c in grandchildren if c.status is TaskStatus.FAILED]
        assert stopped
        for child in stopped:
            assert "ancestor task root usage limit total_tokens (1000)" in (child.error or "")
        assert boss.status is TaskStatus.FAILED
        assert "parent task root usage limit total_tokens (1000)" in (boss.error or "")
        assert result.status is TaskStatus.FAILED


async def test_a_child_called_alone_counts_once_and_leaves_its_parent_the_rest(
    tmp_path: Path,
) -> None:
    kernel = kernel_on(
        tmp_path,
        [
            ScriptedConversation(
                match="^Budget",
                turns=[
                    calls("Spend"),
                    ScriptedTurn(content="Root: done.", usage=TokenUsage(input_tokens=CALL)),
                ],
            ),
            ticking("^Spend", 5),
        ],
    )
    kernel.agent_as_tool(Agent("spender", "Spends tokens.", tools=("tick",)))
    async with kernel:
        request = TaskRequest(
            task="Budget", tools=("spender",), limits=UsageLimits(total_tokens=1000)
        )
        with anyio.fail_after(60):
            result = await kernel.execute_task(request, task_id="root")
        (child,) = await children_of(kernel, "root")
        # 100 + 600 + 100: the parent's last call fits (it would not, were the child's 600
        # counted twice); the totals are each call once.
        assert child.status is TaskStatus.SUCCEEDED and total(child.usage) == 6 * CALL
        assert result.status is TaskStatus.SUCCEEDED and result.output == "Root: done."
        assert total(result.usage) == total((await kernel.get_task("root")).usage) == 8 * CALL
        (run,) = [s for s in await kernel.task_spans("root") if s.kind == "run"]
        assert run.tokens_in == 8 * CALL


class Spent(BaseModel):
    a: str = ""
    b: str = ""
    c: str = ""


async def test_agent_nodes_of_one_workflow_layer_share_the_session_token_limit(
    tmp_path: Path,
) -> None:
    async def start(state: Spent) -> dict[str, str]:
        return {}

    workflow = Workflow("spenders", Spent, allow_fan_out=True).node("start", start)
    for name in "abc":
        workflow = workflow.agent(
            name,
            TaskRequest(task=f"Spend {name}", tools=("tick",)),
            output=name,
        ).edge("start", name)
    forget("spenders")
    kernel = kernel_on(tmp_path, [ticking("^Spend", 6)], session_limit_total_tokens=1000)
    async with kernel:
        with anyio.fail_after(60):
            result = await run_workflow(kernel, workflow, Spent(), task_id="flow")
        children = await children_of(kernel, "flow")
        spent = sum(total(c.usage) for c in children)
        # Alone each node would spend 700 and the layer succeed with 2,100.
        assert total(result.task.usage) == spent <= 1000 + 3 * CALL
        assert result.status is TaskStatus.FAILED
        assert "session of parent task flow usage limit total_tokens (1000)" in (
            result.task.error or ""
        )


def turn(name: str) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedToolCall(name=name, arguments={})],
        usage=TokenUsage(input_tokens=CALL),
    )


async def test_a_child_carried_on_by_its_hosts_approval_counts_all_its_tool_calls(
    tmp_path: Path,
) -> None:
    kernel = kernel_on(
        tmp_path,
        [
            ScriptedConversation(
                match="^Budget",
                turns=[calls("Ship"), turn("tick"), turn("tick"), ScriptedTurn(content="never")],
            ),
            # Approved at once by the host, so carried on by a run started within the first.
            ScriptedConversation(
                match="^Ship",
                turns=[turn("deploy"), turn("tick"), turn("tick"), ScriptedTurn(content="done")],
            ),
        ],
    )
    kernel.agent_as_tool(Agent("spender", "Ships.", tools=("tick", "deploy")))
    kernel.set_approval_callback(
        lambda request: ApprovalDecision(request_id=request.request_id, approved=True)
    )
    async with kernel:
        request = TaskRequest(
            task="Budget", tools=("spender", "tick"), limits=UsageLimits(tool_calls=5)
        )
        with anyio.fail_after(60):
            result = await kernel.execute_task(request, task_id="root")
        (child,) = await children_of(kernel, "root")
        assert child.status is TaskStatus.SUCCEEDED
        # The agent call and the child's three: one more tick fits, not two.
        assert await ticks_of(kernel, "root") == 1
        assert result.status is TaskStatus.FAILED
        assert "task usage limit tool_calls (5)" in (result.error or "")


async def test_a_resumed_team_counts_a_member_waiting_for_a_human_while_another_spends(
    tmp_path: Path,
) -> None:
    members = [
        Agent("waiter", "Deploys.", tools=("tick", "deploy"), task_template="Wait: {task}"),
        Agent("spender", "Spends.", tools=("tick", "hold"), task_template="Spend: {task}"),
    ]
    team = Team("pair", "Two.", members, aggregate=lambda task, results: "aggregated")
    script = [
        # 300 spent, then a durable question to a human.
        ScriptedConversation(
            match="^Wait",
            turns=[turn("tick"), turn("tick"), turn("deploy"), ScriptedTurn(content="done")],
        ),
        ScriptedConversation(
            match="^Spend", turns=[turn("hold"), *[turn("tick")] * 12, ScriptedTurn(content="ok")]
        ),
    ]
    HOLDING["on"], HOLDING["reached"] = True, anyio.Event()
    first = kernel_on(tmp_path, script, session_limit_total_tokens=1000)
    async with first, anyio.create_task_group() as group:
        waiting = anyio.Event()
        first.event_bus.subscribe(TaskWaitingApproval, lambda _: waiting.set())

        async def run() -> None:
            await first.run_team(team, "go", task_id="team")

        group.start_soon(run)
        with anyio.fail_after(60):
            await waiting.wait()
            await HOLDING["reached"].wait()
        first.leave_runs()  # the process "dies" with the waiter waiting, the spender holding
        group.cancel_scope.cancel()
    HOLDING["on"] = False
    second = kernel_on(tmp_path, script, session_limit_total_tokens=1000)
    second.add_team(team)
    async with second:
        (waiter,) = [t for t in await children_of(second, "team") if "Wait" in t.request.task]
        spender_ended = anyio.Event()

        def ended(event: Any) -> None:
            if event.task_id != "team" and event.task_id != waiter.task_id:
                spender_ended.set()

        for kind in (TaskSucceeded, TaskFailed, TaskCanceled):
            second.event_bus.subscribe(kind, ended)
        results = []

        async def resume() -> None:
            results.append(await second.resume("team"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(resume)
                await spender_ended.wait()
                (pending,) = await second.pending_approvals()
                decision = ApprovalDecision(request_id=pending.request_id, approved=True)
                await second.resolve_approval(pending.request_id, decision)
        children = await children_of(second, "team")
        spent = sum(total(c.usage) for c in children)
        # The waiter's 300 counted while it waited: the spender had 700 left, not 1,000.
        assert spent <= 1000 + 2 * CALL, [(c.task_id, total(c.usage)) for c in children]
        (result,) = results
        assert total(result.usage) == spent


async def test_members_started_once_the_session_limit_is_spent_are_refused_naming_it(
    tmp_path: Path,
) -> None:
    members = [
        Agent(f"m{n}", "Spends tokens.", tools=("tick",), task_template=f"As m{n}: {{task}}")
        for n in range(3)
    ]
    kernel = kernel_on(tmp_path, [ticking("^As m", 6)], session_limit_total_tokens=500)
    seen: list[MemberResult] = []

    def combine(task: str, results: Any) -> str:
        seen.extend(results)
        return "combined"

    team = Team("one-by-one", "Spenders.", members, aggregate=combine, max_concurrent=1)
    async with kernel:
        with anyio.fail_after(60):
            await kernel.run_team(team, "check", task_id="team")
        refused = [r for r in seen if r.task_id is None]
        assert len(refused) == 2
        for member in refused:
            assert "this task's session's usage limit total_tokens (500) is spent" in (
                member.error or ""
            )
