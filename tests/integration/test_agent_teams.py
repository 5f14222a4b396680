"""Teams and supervisors on real SQLite, built on nested agents (each member a child task)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import UsageError
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.kernel.agent_teams import MemberResult, Team
from core_agent.kernel.nested_agents import Agent
from core_agent.tooling.function_tool import tool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import AgentHandoff, TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio


@tool(capabilities={"read"})
async def survey(area: str) -> str:
    """Survey an area (it takes a while)."""
    await anyio.sleep(0.05)
    return f"{area}: 3 issues"


def call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


def kernel_on(
    data_dir: Path, conversations: list[ScriptedConversation], tools: Sequence[Any] = ()
) -> AgentKernel:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": data_dir, "recovery": "off", "model_max_retries": 0}
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations))
    container.tool_registry.override(ToolRegistry([survey, *tools]))
    kernel: AgentKernel = container.kernel()
    return kernel


MEMBERS = [f"m{n}" for n in range(1, 6)]


def member_script(name: str) -> ScriptedConversation:
    if name == "m3":  # this member's model fails: the member fails, not the team
        turns = [ScriptedTurn(error=ScriptedError(message="model overloaded", status_code=400))]
    else:
        turns = [call("survey", area=name), ScriptedTurn(content=f"{name} saw 3 issues")]
    return ScriptedConversation(match=f"^As {name}:", turns=turns)


def overlap(intervals: Sequence[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


async def test_a_team_of_five_runs_two_at_a_time_and_one_failure_does_not_fail_it(
    tmp_path: Path,
) -> None:
    seen: list[MemberResult] = []

    def combine(task: str, results: Sequence[MemberResult]) -> str:
        seen.extend(results)
        done = [r.output for r in results if r.succeeded]
        failed = [f"{r.agent} failed" for r in results if not r.succeeded]
        return f"{task} -> " + "; ".join([*map(str, done), *failed])

    team = Team(
        "auditors",
        "Audits the code base from five angles.",
        members=[
            Agent(name, f"Auditor {name}.", tools=("survey",), task_template=f"As {name}: {{task}}")
            for name in MEMBERS
        ],
        aggregate=combine,
        max_concurrent=2,
    )
    kernel = kernel_on(tmp_path, [member_script(name) for name in MEMBERS])
    async with kernel:
        result = await kernel.run_team(team, "Audit the repo")
        assert result.status is TaskStatus.SUCCEEDED
        assert result.output is not None and result.output.startswith("Audit the repo -> ")
        assert "m1 saw 3 issues" in result.output and "m3 failed" in result.output
        # Each member is reported, its failure with the reason.
        assert [r.agent for r in seen] == MEMBERS
        (failed,) = [r for r in seen if not r.succeeded]
        assert failed.agent == "m3" and failed.status is TaskStatus.FAILED
        assert "model overloaded" in (failed.error or "")
        # Members are child tasks of the team's task.
        team_task = await kernel.get_task(result.task_id)
        assert team_task.strategy == "team"
        children = [t for t in await kernel.list_tasks() if t.request.parent is not None]
        assert len(children) == 5
        assert {c.request.parent.task_id for c in children if c.request.parent} == {result.task_id}
        # Never more than two at once: the members' spans, and their own tasks' run spans.
        members = [s for s in await kernel.task_spans(result.task_id) if s.kind == "step"]
        assert sorted(s.name for s in members) == [f"member {name}" for name in MEMBERS]
        assert overlap([(s.started_at, s.ended_at) for s in members]) == 2
        runs = []
        for child in children:
            runs += [s for s in await kernel.task_spans(child.task_id) if s.kind == "run"]
        assert len(runs) == 5
        assert overlap([(s.started_at, s.ended_at) for s in runs]) <= 2
        by_member = {s.attributes["child_task_id"]: s for s in members}
        for child in children:
            assert child.request.parent is not None
            assert by_member[child.task_id].span_id == child.request.parent.span_id


async def test_a_team_rejects_a_bad_definition() -> None:
    member = Agent("m1", "A member.")
    with pytest.raises(UsageError, match="no members"):
        Team("t", "A team.", members=[], aggregate=lambda task, results: "")
    with pytest.raises(UsageError, match="share a name"):
        Team("t", "A team.", members=[member, member], aggregate=lambda task, results: "")
    with pytest.raises(UsageError, match="max_concurrent"):
        Team("t", "A team.", members=[member], aggregate=lambda t, r: "", max_concurrent=0)
    with pytest.raises(UsageError, match="cannot be called by a model"):
        Agent("two words", "An agent.")


async def test_a_supervisor_delegates_to_two_specialists_and_every_handoff_is_recorded(
    tmp_path: Path,
) -> None:
    turns: dict[str, list[ScriptedTurn]] = {
        "^Write a note": [
            call("researcher", task="Find facts about bees"),
            call("writer", task="Write two lines from: bees make honey"),
            ScriptedTurn(content="Note: bees make honey, and it keeps."),
        ],
        "^Find facts": [ScriptedTurn(content="bees make honey")],
        "^Write two lines": [ScriptedTurn(content="Bees make honey; it keeps.")],
    }
    kernel = kernel_on(tmp_path, [ScriptedConversation(match=m, turns=t) for m, t in turns.items()])
    specialists = [
        Agent("researcher", "Finds facts.", tools=("survey",)),
        Agent("writer", "Writes short texts.", tools=()),
    ]
    async with kernel:
        lead = kernel.supervisor(Agent("lead", "Leads.", tools=()), specialists)
        assert lead.tools == ("researcher", "writer")
        assert lead.system_prompt is not None and "- writer: Writes short texts." in (
            lead.system_prompt
        )
        result = await kernel.run_agent(lead, "Write a note about bees")
        assert result.status is TaskStatus.SUCCEEDED
        assert result.output == "Note: bees make honey, and it keeps."
        events = await kernel.task_events(result.task_id)
        handoffs = [e for e in events if isinstance(e, AgentHandoff)]
        assert [(h.agent, h.sub_task) for h in handoffs] == [
            ("researcher", "Find facts about bees"),
            ("writer", "Write two lines from: bees make honey"),
        ]
        spans = {s.span_id: s for s in await kernel.task_spans(result.task_id)}
        answers = {}
        for handoff in handoffs:
            child = await kernel.get_task(handoff.child_task_id)
            assert child.status is TaskStatus.SUCCEEDED
            assert child.request.parent is not None
            assert child.request.parent.agent == handoff.agent
            span = spans[child.request.parent.span_id or ""]
            assert (span.kind, span.name) == ("tool", handoff.agent)
            answers[handoff.agent] = child.output
        assert answers == {
            "researcher": "bees make honey",
            "writer": "Bees make honey; it keeps.",
        }
        completed: list[Any] = [e for e in events if e.kind == "tool.completed"]
        assert [e.result.content for e in completed] == list(answers.values())


async def test_a_team_called_as_a_tool_runs_one_level_down_its_members_two(
    tmp_path: Path,
) -> None:
    pair = [
        Agent(n, f"Member {n}.", tools=(), task_template=f"As {n}: {{task}}") for n in MEMBERS[:2]
    ]
    team = Team(
        "pair", "Two opinions.", pair, aggregate=lambda task, results: f"{len(results)} opinions"
    )
    kernel = kernel_on(
        tmp_path,
        [
            ScriptedConversation(
                match="^Ask the pair",
                turns=[call("pair", task="Is it ready?"), ScriptedTurn(content="They answered.")],
            ),
            *(
                ScriptedConversation(match=f"^As {n}:", turns=[ScriptedTurn(content="yes")])
                for n in MEMBERS[:2]
            ),
        ],
    )
    async with kernel:
        tool = kernel.agent_as_tool(team)
        assert tool.spec.name == "pair" and not tool.spec.idempotent
        events = [
            e async for e in kernel.stream_task(TaskRequest(task="Ask the pair", tools=("pair",)))
        ]
        assert events[-1].kind == "task.succeeded" and events[-1].depth == 0
        ends = [(e.depth, getattr(e, "output", None)) for e in events if e.kind == "task.succeeded"]
        assert ends == [(2, "yes"), (2, "yes"), (1, "2 opinions"), (0, "They answered.")]


async def test_a_specialist_whose_name_another_tool_has_is_refused(tmp_path: Path) -> None:
    kernel = kernel_on(tmp_path, [])
    writer = Agent("writer", "Writes short texts.", tools=())
    kernel.agent_as_tool(Agent("writer", "An older writer.", tools=()))
    lead = Agent("lead", "Leads.", tools=())
    # The prompt would describe one agent while its calls go to another tool.
    with pytest.raises(UsageError, match=r"'survey'.*already registered"):
        kernel.supervisor(lead, [Agent("survey", "Does research.", tools=())])
    with pytest.raises(UsageError, match=r"'writer'.*already registered"):
        kernel.supervisor(lead, [writer])
    # The same agent again is fine: it is already its tool.
    same = Agent("editor", "Edits.", tools=())
    kernel.supervisor(lead, [same])
    kernel.supervisor(lead, [same])


def fine_member() -> Agent:
    return Agent("good", "A good member.", tools=("survey",), task_template="As good: {task}")


def fine_script() -> ScriptedConversation:
    return ScriptedConversation(match="^As good:", turns=[ScriptedTurn(content="good answer")])


def listed(task: str, results: Sequence[MemberResult]) -> str:
    return " | ".join(f"{r.agent}:{r.status.value}:{r.error or r.output}" for r in results)


async def test_run_team_refuses_a_member_naming_a_tool_the_kernel_lacks_before_anything_runs(
    tmp_path: Path,
) -> None:
    # Seen before running, as agent_as_tool sees it: not found by the member's run after
    # its teammates have started (which took the whole team down).
    absent = Agent("bad", "Names a tool nobody has.", tools=("survey", "no_such_tool"))
    team = Team("t", "A team.", members=[fine_member(), absent], aggregate=listed)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        with pytest.raises(UsageError, match=r"agent 'bad' of team 't' .*: no_such_tool"):
            await kernel.run_team(team, "do it")
        assert await kernel.list_tasks() == []


async def test_a_member_whose_run_raises_is_a_failed_result_the_others_are_aggregated(
    tmp_path: Path,
) -> None:
    # A team known to the kernel (add_team) runs as an ordinary task, as recovery carries it
    # on: a tool its member names may be gone by then (an MCP server that did not start).
    absent = Agent("bad", "Names a tool nobody has.", tools=("no_such_tool",))
    team = Team("t", "A team.", members=[fine_member(), absent], aggregate=listed)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        kernel.add_team(team)
        result = await kernel.execute_task(team.request("do it"))
        tasks = await kernel.list_tasks()
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output is not None
    good, bad = result.output.split(" | ")
    assert good == "good:succeeded:good answer"
    assert bad.startswith("bad:failed:unknown tool 'no_such_tool'")
    (member,) = [t for t in tasks if t.request.parent is not None]
    assert member.status is TaskStatus.SUCCEEDED  # not canceled by its teammate's error


async def test_an_aggregating_agent_that_cannot_run_fails_the_team_with_the_reason(
    tmp_path: Path,
) -> None:
    judge = Agent("judge", "Combines.", tools=("no_such_tool",))
    team = Team("t", "A team.", members=[fine_member()], aggregate=judge)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        kernel.add_team(team)
        result = await kernel.execute_task(team.request("do it"))
    assert result.status is TaskStatus.FAILED
    assert "the aggregating agent judge could not run: unknown tool 'no_such_tool'" in (
        result.error or ""
    )


class _Halt(BaseException):
    """A host's own BaseException, outside Exception like SystemExit."""


@pytest.mark.parametrize("raised", [SystemExit(3), _Halt("halted")], ids=lambda e: type(e).__name__)
async def test_an_aggregation_raising_a_base_exception_fails_the_team_not_cancels_it(
    tmp_path: Path, raised: BaseException
) -> None:
    def aggregate(task: str, results: Sequence[MemberResult]) -> str:
        raise raised

    team = Team("t", "A team.", members=[fine_member()], aggregate=aggregate)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        result = await kernel.run_team(team, "do it")
        stored = await kernel.get_task(result.task_id)
    assert result.status is TaskStatus.FAILED and stored.status is TaskStatus.FAILED
    expected = f"the aggregation failed: {type(raised).__name__}: {raised}"
    assert expected in (result.error or "") and expected in (stored.error or "")


async def test_canceling_a_team_still_cancels_its_running_members(tmp_path: Path) -> None:
    # A member's failure is a result; a cancel is not a failure: it still stops every member.
    entered = anyio.Event()

    @tool(capabilities={"read"})
    async def wait_long(area: str) -> str:
        """Waits."""
        entered.set()
        await anyio.sleep_forever()
        return area

    member = Agent("slow", "Waits.", tools=("wait_long",), task_template="As slow: {task}")
    script = ScriptedConversation(match="^As slow:", turns=[call("wait_long", area="x")])
    team = Team("t", "A team.", members=[member], aggregate=listed)
    kernel = kernel_on(tmp_path, [script], tools=[wait_long])
    outcome: list[Any] = []
    async with kernel:

        async def run() -> None:
            outcome.append(await kernel.run_team(team, "do it", task_id="team-1"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await entered.wait()
            await kernel.cancel_task("team-1", "enough")
        (child,) = [t for t in await kernel.list_tasks() if t.request.parent is not None]
    assert outcome[0].status is TaskStatus.CANCELED
    assert child.status is TaskStatus.CANCELED


async def test_a_member_whose_tool_raises_cancelled_itself_is_still_a_result(
    tmp_path: Path,
) -> None:
    # Nobody canceled the team: the tool's own CancelledError (a future something else
    # canceled) is that call's error; the member was taken for canceled and left out.
    @tool(capabilities={"read"})
    async def probe(area: str) -> str:
        """Probes."""
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future
        return area

    bad = Agent("bad", "Probes.", tools=("probe",), task_template="As bad: {task}")
    script = ScriptedConversation(
        match="^As bad:", turns=[call("probe", area="x"), ScriptedTurn(content="bad answer")]
    )
    team = Team("t", "A team.", members=[fine_member(), bad], aggregate=listed)
    kernel = kernel_on(tmp_path, [fine_script(), script], tools=[probe])
    async with kernel:
        result = await kernel.run_team(team, "do it")
        children = [t for t in await kernel.list_tasks() if t.request.parent is not None]
    assert result.status is TaskStatus.SUCCEEDED
    assert result.output == "good:succeeded:good answer | bad:succeeded:bad answer"
    assert sorted(child.status.value for child in children) == ["succeeded", "succeeded"]


async def test_an_aggregation_raising_a_group_of_its_own_cancel_and_exit_fails_the_team(
    tmp_path: Path,
) -> None:
    def aggregate(task: str, results: Sequence[MemberResult]) -> str:
        raise BaseExceptionGroup("its own", [asyncio.CancelledError(), SystemExit(3)])

    team = Team("t", "A team.", members=[fine_member()], aggregate=aggregate)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        result = await kernel.run_team(team, "do it")
        stored = await kernel.get_task(result.task_id)
    assert result.status is TaskStatus.FAILED and stored.status is TaskStatus.FAILED
    # What the group holds, not "(2 sub-exceptions)".
    assert (
        "the aggregation failed: BaseExceptionGroup: its own (CancelledError; SystemExit: 3)"
        in (stored.error or "")
    )


async def test_a_sync_aggregation_runs_off_the_event_loop(tmp_path: Path) -> None:
    # One that blocks (a slow library, a sleep) would stall every other task of the host.
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def aggregate(task: str, results: Sequence[MemberResult]) -> str:
        threads.append(threading.get_ident())
        return listed(task, results)

    team = Team("t", "A team.", members=[fine_member()], aggregate=aggregate)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        result = await kernel.run_team(team, "do it")
    assert result.status is TaskStatus.SUCCEEDED and result.output == "good:succeeded:good answer"
    assert threads and threads[0] != loop_thread


async def test_a_sync_aggregation_raising_generator_exit_fails_the_team(tmp_path: Path) -> None:
    # In its worker thread: handed back as is, it would close the team's coroutines.
    def aggregate(task: str, results: Sequence[MemberResult]) -> str:
        raise GeneratorExit

    team = Team("t", "A team.", members=[fine_member()], aggregate=aggregate)
    kernel = kernel_on(tmp_path, [fine_script()])
    async with kernel:
        result = await kernel.run_team(team, "do it")
    assert result.status is TaskStatus.FAILED
    assert "the aggregation failed: GeneratorExit" in (result.error or "")
