"""A task's ending commits as one transaction, its start with its route: real SQLite statements.

What a user would notice otherwise: a process that dies between the ending's writes leaves a
task ``succeeded`` whose turn is missing from its session's history (the next task of the
conversation does not see it), or a root span saying the task still runs. The statements
the kernel's connection runs are watched through SQLite's trace callback and split into
transactions; the move to ``succeeded`` must share its transaction with the session's turn
and the root span, the move to ``running`` with the route and the strategy event. Events
still reach subscribers in their order, once stored.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator

import pytest

from core_agent import Agent, tool
from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeTraceStore
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from providers.sqlite.database import SqliteDatabase
from shared.agent_protocol import (
    EPHEMERAL_EVENT_KINDS,
    ApprovalDecision,
    ParentTask,
    TaskEvent,
    TaskRequest,
    TaskStatus,
)
from support.database_faults import refuse_inserts

pytestmark = pytest.mark.anyio


@tool
def note(text: str) -> str:
    """Note something down.

    Args:
        text: What to note.
    """
    return f"noted {text}"


def transactions(statements: list[str]) -> list[list[str]]:
    """The writes of each committed transaction, in order."""
    done: list[list[str]] = []
    current: list[str] | None = None
    for statement in statements:
        head = statement.lstrip().split(" ", 1)[0].upper()
        if head == "BEGIN":
            current = []
        elif head == "COMMIT" and current is not None:
            done.append(current)
            current = None
        elif current is not None and head in ("INSERT", "UPDATE", "DELETE"):
            current.append(statement)
    return done


@contextlib.asynccontextmanager
async def statements_run(settings: AgentSettings) -> AsyncIterator[list[str]]:
    """The statements the kernel's connection runs inside the block, as SQLite traces them."""
    database = SqliteDatabase.open(settings.database_path)
    statements: list[str] = []
    try:
        database.call(lambda conn: conn.set_trace_callback(statements.append))
        yield statements
    finally:
        database.call(lambda conn: conn.set_trace_callback(None))
        await database.close()


def with_(transaction: list[str], *fragments: str) -> bool:
    return all(any(fragment in statement for statement in transaction) for fragment in fragments)


async def test_a_tasks_ending_commits_once_and_its_start_with_its_route(
    settings: AgentSettings,
) -> None:
    container = KernelContainer()
    container.settings.override(settings)
    container.tool_registry.override(ToolRegistry([note]))
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [
                ScriptedTurn(tool_calls=[ScriptedToolCall(name="note", arguments={"text": "a"})]),
                ScriptedTurn(content="done"),
            ]
        )
    )
    kernel = container.kernel()
    heard: list[TaskEvent] = []
    async with kernel:
        kernel.event_bus.subscribe(None, lambda event: heard.append(event))  # type: ignore[arg-type]
        async with statements_run(settings) as statements:
            result = await kernel.execute_task(
                TaskRequest(task="note a", session_id="s1", force_mode="react")
            )
        transcript = await kernel.session_transcript("s1")

    assert result.status is TaskStatus.SUCCEEDED
    assert [entry.task_id for entry in transcript.entries][-1] == result.task_id
    done = transactions(statements)
    started = [t for t in done if with_(t, "UPDATE agent_tasks SET status = 'running'")]
    ended = [t for t in done if with_(t, "UPDATE agent_tasks SET status = 'succeeded'")]
    assert len(started) == 1 and len(ended) == 1
    # The start: the move, its event, the route span and the strategy event; the recall
    # (after reads, apart: see ``AgentKernel._start_held``) follows in one commit.
    assert with_(started[0], "'task.started'", "'route','planning'", "'task.strategy_selected'")
    after_start = done[done.index(started[0]) + 1]
    assert with_(after_start, "'memory.recall','memory'")
    assert not with_(after_start, "agent_tool_calls")
    # The ending: the final answer (its model span and checkpoint), the run span, the move
    # and its event, the root span, the session's turn.
    assert with_(
        ended[0],
        "INSERT INTO agent_checkpoints",
        "'llm','ok'",
        "'run','run'",
        "'task.succeeded'",
        "NULL,'task','task'",
        "INSERT INTO agent_session_entries",
        "UPDATE agent_sessions",
    )
    # Creation, start, recall, the step's intent and result, the final answer with the
    # ending (eleven before the lifecycle's writes were grouped, seven before the answer
    # joined the ending).
    assert len(done) == 6
    # Published once stored, in the order they were numbered.
    mine = [event for event in heard if getattr(event, "task_id", None) == result.task_id]
    assert [event.seq for event in mine] == sorted(event.seq for event in mine)
    assert mine[-1].kind == "task.succeeded"


async def test_a_failed_write_after_the_ending_move_leaves_the_move_standing(
    settings: AgentSettings,
) -> None:
    """A session turn that cannot be written is logged; the task's ending stands, as before."""
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(ScriptedLLMGateway([ScriptedTurn(content="done")]))
    kernel = container.kernel()
    async with kernel:
        await refuse_inserts(settings.database_path, "no_turns", "agent_session_entries")
        result = await kernel.execute_task(TaskRequest(task="hi", session_id="s2"))
        stored = await kernel.get_task(result.task_id)
        spans = await kernel.task_spans(result.task_id)
        transcript = await kernel.session_transcript("s2")
    assert result.status is stored.status is TaskStatus.SUCCEEDED
    assert any(span.kind == "task" for span in spans)
    assert transcript.entries == []


def test_trace_callback_sees_sqlite_statements(tmp_path: object) -> None:
    """The helper above splits real statements into transactions."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("COMMIT")
    assert transactions(seen) == [["INSERT INTO t VALUES (1)"]]


async def test_a_tainted_parents_child_is_tainted_in_the_commit_that_starts_it(
    settings: AgentSettings,
) -> None:
    """A crash after the start leaves a child of a tainted parent tainted, not clean.

    A task killed once it is ``running`` resumes without running its start again: the taint
    its parent handed down must be stored with the move, or the resumed child's calls are
    graded as if it had never seen untrusted content.
    """
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(ScriptedLLMGateway([ScriptedTurn(content="done")]))
    kernel = container.kernel()
    async with kernel:
        parent = await kernel.execute_task(TaskRequest(task="parent", force_mode="react"))
        async with statements_run(settings) as statements:
            result = await kernel.execute_task(
                TaskRequest(
                    task="child",
                    force_mode="react",
                    parent=ParentTask(task_id=parent.task_id, depth=1, agent="a", tainted=True),
                )
            )
        stored = await kernel.get_task(result.task_id)
    assert stored.tainted
    started = [
        t for t in transactions(statements) if with_(t, "UPDATE agent_tasks SET status = 'running'")
    ]
    assert len(started) == 1
    assert with_(started[0], "'task.started'", "'task.tainted'")


async def test_an_event_whose_write_after_the_move_failed_is_never_published(
    settings: AgentSettings,
) -> None:
    """Subscribers hear only stored events: a skipped write's event is not announced."""
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(ScriptedLLMGateway([ScriptedTurn(content="完成了")]))
    kernel = container.kernel()
    heard: list[TaskEvent] = []
    kernel.event_bus.subscribe(None, heard.append)
    async with kernel:
        await refuse_inserts(
            settings.database_path,
            "no_strategy",
            "agent_task_events",
            when="NEW.event_type = 'task.strategy_selected'",
        )
        result = await kernel.execute_task(TaskRequest(task="你好", force_mode="react"))
        stored = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    mine = [e for e in heard if getattr(e, "task_id", None) == result.task_id]
    assert "task.strategy_selected" not in [e.kind for e in mine]
    # Every event heard is one that was stored.
    assert {e.seq for e in mine if e.kind not in EPHEMERAL_EVENT_KINDS} <= {e.seq for e in stored}


def plan(step: str) -> str:
    return json.dumps(
        {"steps": [{"id": step, "goal": f"do {step}", "depends_on": [], "success_criterion": "ok"}]}
    )


def failing_everywhere() -> list[ScriptedConversation]:
    """Plan, step, replan and the ReAct fallback all fail: the task asks a human."""
    offline = ScriptedTurn(error=ScriptedError(message="source offline", status_code=500))
    return [
        ScriptedConversation(match=r"^Plan this task:", turns=[ScriptedTurn(content=plan("a"))]),
        ScriptedConversation(match=r"^Your step", turns=[offline]),
        ScriptedConversation(match=r"^Collect the reports", turns=[offline]),
    ]


def kernel_asking_a_human(settings: AgentSettings, **overrides: object) -> AgentKernel:
    """A kernel whose plan-and-execute tasks fail everywhere and end up asking a human."""
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(ScriptedLLMGateway(conversations=failing_everywhere()))
    for name, replacement in overrides.items():
        getattr(container, name).override(replacement)
    return container.kernel()


async def test_a_question_answered_no_ends_the_task_in_the_decisions_commit(
    settings: AgentSettings,
) -> None:
    """The decision, the move to ``failed`` and its event, the decision's span, the root span
    and the session's turn: one transaction, so a crash cannot store some without the rest
    (a task failed with no ``task.failed`` event, no root span, its turn missing)."""
    kernel = kernel_asking_a_human(settings)
    heard: list[TaskEvent] = []
    async with kernel:
        asked = await kernel.execute_task(
            TaskRequest(task="Collect the reports", session_id="s3", force_mode="plan_execute")
        )
        assert asked.status is TaskStatus.WAITING_APPROVAL, asked.error
        assert asked.pending_approval is not None
        kernel.event_bus.subscribe(None, lambda event: heard.append(event))  # type: ignore[arg-type]
        async with statements_run(settings) as statements:
            denied = await kernel.resolve_approval(
                asked.pending_approval,
                ApprovalDecision(
                    request_id=asked.pending_approval, approved=False, reason="not worth it"
                ),
            )
        events = await kernel.task_events(asked.task_id)
        transcript = await kernel.session_transcript("s3")

    assert denied.status is TaskStatus.FAILED and "not worth it" in (denied.error or "")
    (answer,) = transactions(statements)
    assert with_(
        answer,
        "UPDATE agent_approvals SET status = 'denied'",
        "'approval.resolved'",
        "UPDATE agent_tasks SET status = 'failed'",
        "'task.failed'",
        "'question','approval'",
        "NULL,'task','task'",
        "INSERT INTO agent_session_entries",
    )
    # Numbered without a gap, the failure last; heard once stored, in that order.
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert [event.kind for event in events][-2:] == ["approval.resolved", "task.failed"]
    mine = [event.kind for event in heard if getattr(event, "task_id", None) == asked.task_id]
    assert mine == ["approval.resolved", "task.failed"]
    assert transcript.entries[-1].task_id == asked.task_id


async def test_a_cancel_of_a_task_nobody_runs_ends_it_in_one_commit(
    settings: AgentSettings,
) -> None:
    """A task waiting for a human, canceled by whoever calls ``cancel_task``: the move, its
    event, the root span and the session's turn commit together (a crash between left a
    canceled task whose trace said it still ran). Nobody runs the task to add its turn: the
    cancel does, so the session's next task knows the question was asked and not answered."""
    kernel = kernel_asking_a_human(settings)
    async with kernel:
        asked = await kernel.execute_task(
            TaskRequest(task="Collect the reports", session_id="s5", force_mode="plan_execute")
        )
        assert asked.status is TaskStatus.WAITING_APPROVAL, asked.error
        async with statements_run(settings) as statements:
            await kernel.cancel_task(asked.task_id, "不需要了")
        stored = await kernel.get_task(asked.task_id)
        spans = await kernel.task_spans(asked.task_id)
        transcript = await kernel.session_transcript("s5")
    assert stored.status is TaskStatus.CANCELED
    (cancel,) = transactions(statements)
    assert with_(cancel, "UPDATE agent_tasks SET status = 'canceled'", "'task.canceled'")
    assert with_(cancel, "NULL,'task','task'", "INSERT INTO agent_session_entries")
    turn = [entry.message for entry in transcript.entries if entry.task_id == asked.task_id]
    assert [type(message).__name__ for message in turn] == ["UserMessage", "AssistantMessage"]
    assert turn[0].content == "Collect the reports"
    assert "canceled" in str(turn[1].content) and "不需要了" in str(turn[1].content)
    (root,) = [span for span in spans if span.parent_span_id is None]
    assert root.attributes["task_status"] == "canceled"
    assert root.attributes["reason"] == "不需要了"


async def test_a_decision_is_heard_of_even_when_what_follows_it_fails(
    settings: AgentSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """The decision and the task's failure are stored and published; the failing part of its
    bookkeeping (here the decision's span) is logged and left out."""
    kernel = kernel_asking_a_human(settings, trace_store=FakeTraceStore(fail_on_kind="approval"))
    heard: list[TaskEvent] = []
    async with kernel:
        asked = await kernel.execute_task(
            TaskRequest(task="Collect the reports", session_id="s4", force_mode="plan_execute")
        )
        assert asked.pending_approval is not None
        kernel.event_bus.subscribe(None, lambda event: heard.append(event))  # type: ignore[arg-type]
        denied = await kernel.resolve_approval(
            asked.pending_approval,
            ApprovalDecision(request_id=asked.pending_approval, approved=False, reason="算了"),
        )
        stored = await kernel.get_task(asked.task_id)
    assert denied.status is stored.status is TaskStatus.FAILED
    mine = [event.kind for event in heard if getattr(event, "task_id", None) == asked.task_id]
    assert mine == ["approval.resolved", "task.failed"]
    assert "what follows its decision failed" in caplog.text


async def test_a_nested_agents_task_commits_twice_inside_its_parents_step(
    settings: AgentSettings,
) -> None:
    """A child task's records ride on two commits: its start, and its ending with its answer.

    The start commits with the parent's handoff and the child's creation, before the child's
    model is called (a stream hears of the child before its model's first words); the
    answer commits with the ending. Each commit is a write of every page it touched: a
    nested call is dearer by as many as it takes.
    """
    echo: dict[str, object] = {"task": "echo 7"}
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(
        ScriptedLLMGateway(
            conversations=[
                ScriptedConversation(match=r"^echo 7$", turns=[ScriptedTurn(content="echoed 7")]),
                ScriptedConversation(
                    match=r"^parent$",
                    turns=[
                        ScriptedTurn(tool_calls=[ScriptedToolCall(name="helper", arguments=echo)]),
                        ScriptedTurn(content="done"),
                    ],
                ),
            ]
        )
    )
    kernel = container.kernel()
    kernel.agent_as_tool(Agent("helper", "Echoes.", tools=(), force_mode="react"))
    async with kernel:
        async with statements_run(settings) as statements:
            result = await kernel.execute_task(TaskRequest(task="parent", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    handoffs = [e for e in events if e.kind == "agent.handoff"]
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "done"
    child = handoffs[0].child_task_id  # type: ignore[attr-defined]
    childs = [t for t in transactions(statements) if any(child in s for s in t)]
    assert len(childs) == 2, childs
    start, ending = childs
    assert with_(
        start,
        "'agent.handoff'",
        "INSERT INTO agent_tasks",
        "'task.queued'",
        "UPDATE agent_tasks SET status = 'running'",
        "'route','planning'",
    )
    assert not with_(start, "'llm','ok'")
    assert with_(
        ending,
        "INSERT INTO agent_checkpoints",
        "'llm','ok'",
        "'task.succeeded'",
        "NULL,'task','task'",
    )
