"""Commits shared by two sets of records: a child task's start with its parent's step, a
final answer with its task's ending (``ITaskStore.hand_over``). Real SQLite, faults injected
with triggers: what one task fails to store, or may no longer store, never takes the other's
records with it, and every task still ends with a result.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.kernel.nested_agents import Agent
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import TaskRequest, TaskResult, TaskState, TaskStatus
from support.database_faults import refuse_inserts

pytestmark = pytest.mark.anyio


def calls(*names_and_args: tuple[str, dict[str, Any]]) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedToolCall(name=name, arguments=args) for name, args in names_and_args]
    )


def conversation(match: str, *turns: ScriptedTurn) -> ScriptedConversation:
    return ScriptedConversation(match=match, turns=list(turns))


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
                "recovery": "off",
                # Nobody notices the takeover before the writes under test are made.
                "cancel_check_s": 60.0,
                "task_lease_s": 600.0,
                **settings,
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations))
    container.tool_registry.override(ToolRegistry(tools))
    return container.kernel()


def grab_beside_a_child(tmp_path: Path, meanwhile: Callable[[], None]) -> AgentKernel:
    """A parent whose one turn calls ``grab`` and the agent ``helper`` at once.

    ``grab`` waits for the child to run, does ``meanwhile``, and returns while the child still
    runs (``hold``), so its records are held in the parent's step as the child goes on.
    """
    child_running = anyio.Event()
    grabbed = anyio.Event()

    async def grab() -> str:
        """Grab something."""
        await child_running.wait()
        meanwhile()
        grabbed.set()
        return "grabbed"

    async def hold() -> str:
        """Wait a moment."""
        child_running.set()
        await grabbed.wait()
        await anyio.sleep(0.05)  # grab's records are held in the parent's step by now
        return "held"

    tools = [
        FunctionTool(grab, idempotent=True, capabilities={"read"}),
        FunctionTool(hold, idempotent=True, capabilities={"read"}),
    ]
    kernel = kernel_on(
        tmp_path,
        tools,
        [
            conversation("^child$", calls(("hold", {})), ScriptedTurn(content="child done")),
            conversation(
                "^parent$",
                calls(("grab", {}), ("helper", {"task": "child"})),
                ScriptedTurn(content="parent done"),
            ),
        ],
    )
    kernel.agent_as_tool(Agent("helper", "Helps.", tools=("hold",), force_mode="react"))
    return kernel


async def test_a_parents_held_writes_are_not_committed_under_its_childs_fence(
    tmp_path: Path,
) -> None:
    """The parent lost its lease while a child ran: nothing more of the parent may be stored.

    Parallel calls of one parent turn: ``grab`` (a plain tool) and ``helper`` (an agent). While
    the child runs, another kernel takes the parent over (``grab`` plays it), then ``grab``
    returns: its result is held in the parent's step. The child's ending, under the child's
    fence (the child is still ours), must not carry it into a task another kernel owns.
    """
    db_path = tmp_path / "core_agent.db"

    def take_over() -> None:
        with sqlite3.connect(db_path) as db:  # what the new owner did
            db.execute(
                "UPDATE agent_tasks SET owner = 'other-host:1',"
                " lease_expires_at = '2999-01-01T00:00:00+00:00' WHERE id = 'p'"
            )

    kernel = grab_beside_a_child(tmp_path, take_over)
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(task="parent", force_mode="react", tools=("grab", "helper")),
            task_id="p",
        )
    assert result.status is TaskStatus.RUNNING, result
    with sqlite3.connect(db_path) as db:
        grab_rows = db.execute(
            "SELECT status, result_json FROM agent_tool_calls WHERE task_id = 'p' AND tool = 'grab'"
        ).fetchall()
        after = db.execute(
            "SELECT event_type FROM agent_task_events WHERE task_id = 'p'"
            " AND event_type IN ('tool.completed', 'tool.result')"
        ).fetchall()
    # The stale kernel's result of grab must not be stored in a task it no longer owns.
    assert all(row[1] is None for row in grab_rows), grab_rows
    assert after == [], after


async def test_a_final_answer_whose_write_fails_fails_its_task_with_a_result(
    tmp_path: Path,
) -> None:
    """The answer's records ride in the ending's transaction: one that is refused refuses the
    ``succeeded`` move, and the task fails with why, as a result (not an exception), in a
    commit that leaves those records out.
    """
    kernel = kernel_on(tmp_path, [], [conversation("^hi$", ScriptedTurn(content="done"))])
    async with kernel:
        await refuse_inserts(
            tmp_path / "core_agent.db",
            "no_answer",
            "agent_checkpoints",
            when='NEW.state_json LIKE \'%"phase":"answered"%\'',
        )
        result = await kernel.execute_task(TaskRequest(task="hi", force_mode="react"), task_id="t")
        stored = await kernel.get_task("t")
    assert result.status is stored.status is TaskStatus.FAILED


async def parent_and_child_with_a_refused_write(
    tmp_path: Path, table: str, when: str
) -> tuple[TaskResult, list[TaskState]]:
    """Task ``p`` hands ``child`` to ``helper`` while inserts into ``table`` ``when`` fail."""
    kernel = kernel_on(
        tmp_path,
        [],
        [
            conversation("^child$", ScriptedTurn(content="child done")),
            conversation(
                "^parent$",
                calls(("helper", {"task": "child"})),
                ScriptedTurn(content="parent done"),
            ),
        ],
    )
    kernel.agent_as_tool(Agent("helper", "Helps.", tools=(), force_mode="react"))
    async with kernel:
        await refuse_inserts(tmp_path / "core_agent.db", "refused", table, when=when)
        result = await kernel.execute_task(
            TaskRequest(task="parent", force_mode="react", tools=("helper",)), task_id="p"
        )
        children = [t for t in await kernel.list_tasks() if t.task_id != "p"]
    return result, children


async def test_a_childs_refused_write_does_not_poison_its_parents_step(tmp_path: Path) -> None:
    """A child's answer that cannot be stored fails the child alone: the parent reads a
    tool error and answers (the child's records never wait in the parent's step).
    """
    result, children = await parent_and_child_with_a_refused_write(
        tmp_path,
        "agent_checkpoints",
        when="NEW.task_id != 'p' AND NEW.state_json LIKE '%\"phase\":\"answered\"%'",
    )
    assert [child.status for child in children] == [TaskStatus.FAILED]
    assert result.status is TaskStatus.SUCCEEDED, (result.status, result.error)
    assert result.output == "parent done"


async def test_a_child_whose_start_fails_is_not_left_queued_for_recovery_to_run(
    tmp_path: Path,
) -> None:
    """The child's creation waits in its parent's step for its start: when the start's
    transaction fails, the child is stored and failed, not left ``queued``, owned by this
    kernel, for recovery to run after its parent gave up on it.
    """
    result, children = await parent_and_child_with_a_refused_write(
        tmp_path,
        "agent_task_events",
        when="NEW.task_id != 'p' AND NEW.event_type = 'task.started'",
    )
    assert result.status is TaskStatus.SUCCEEDED, (result.status, result.error)
    assert [child.status for child in children] == [TaskStatus.FAILED], [
        (child.status, child.owner) for child in children
    ]


async def test_a_parents_refused_write_does_not_keep_its_child_from_ending(
    tmp_path: Path,
) -> None:
    """The other way round: the parent's write (its sibling call's ``tool.completed``) is
    refused. The child still ends (here canceled, as the parent's run fails), rather than
    staying ``running``, held by this kernel, for recovery to run after its parent failed.
    """
    kernel = grab_beside_a_child(tmp_path, lambda: None)
    async with kernel:
        await refuse_inserts(
            tmp_path / "core_agent.db",
            "no_parent_completion",
            "agent_task_events",
            when="NEW.task_id = 'p' AND NEW.event_type = 'tool.completed'",
        )
        with contextlib.suppress(Exception):
            await kernel.execute_task(
                TaskRequest(task="parent", force_mode="react", tools=("grab", "helper")),
                task_id="p",
            )
        children = [t for t in await kernel.list_tasks() if t.task_id != "p"]
    assert [child.status.is_terminal for child in children] == [True], [
        (child.status, child.owner) for child in children
    ]
