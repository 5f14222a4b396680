"""The parts of nested agents a user meets directly: agent definitions, the tool's arguments,
and how a stream places a child's events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core_agent.contracts.errors import ToolArgumentsError, UsageError
from core_agent.contracts.executor import ExecutionContext, RunState, TaskIdentity
from core_agent.kernel.event_bus import InProcessEventBus
from core_agent.kernel.nested_agents import (
    Agent,
    AgentTool,
    NestedAgents,
    TaskTree,
    child_task_id,
)
from fakes.stores import FakeTaskStore
from shared.agent_protocol import (
    ParentTask,
    TaskQueued,
    TaskRequest,
    TaskStarted,
    TaskState,
    TaskStatus,
    TokenUsage,
    UsageLimits,
)


def queued(task_id: str, parent: str | None, depth: int = 1) -> TaskQueued:
    link = ParentTask(task_id=parent, depth=depth, agent="a") if parent else None
    return TaskQueued(
        event_id=f"e-{task_id}",
        task_id=task_id,
        seq=1,
        occurred_at=datetime.now(UTC),
        session_id="s",
        trace_id="t",
        request=TaskRequest(task="x", parent=link),
    )


def started(task_id: str) -> TaskStarted:
    return TaskStarted(event_id="e", task_id=task_id, seq=2, occurred_at=datetime.now(UTC))


def test_a_stream_takes_its_descendants_events_with_their_depth_and_nothing_else() -> None:
    tree = TaskTree("root")
    assert tree.admit(started("root")).depth == 0  # type: ignore[union-attr]
    assert tree.admit(started("child")) is None  # not known to be ours yet
    assert tree.admit(queued("child", "root")).depth == 1  # type: ignore[union-attr]
    assert tree.admit(queued("grandchild", "child", 2)).depth == 2  # type: ignore[union-attr]
    assert tree.admit(started("grandchild")).depth == 2  # type: ignore[union-attr]
    assert tree.admit(queued("stranger", "elsewhere")) is None
    assert tree.admit(queued("top", None)) is None


def test_an_agent_tool_takes_one_non_empty_task_and_says_what_is_wrong() -> None:
    runs = NestedAgents(
        task_store=FakeTaskStore(),
        event_bus=InProcessEventBus(),
        execute=None,  # type: ignore[arg-type]
        resume=None,  # type: ignore[arg-type]
        cancel=None,  # type: ignore[arg-type]
    )
    tool = AgentTool(Agent("helper", "Helps."), runs, capabilities=frozenset())
    assert tool.spec.resumable and not tool.spec.idempotent
    assert tool.validate_arguments({"task": "do it"}) == {"task": "do it"}
    with pytest.raises(ToolArgumentsError, match="non-empty string"):
        tool.validate_arguments({"task": "  "})
    with pytest.raises(ToolArgumentsError, match="unexpected depth"):
        tool.validate_arguments({"task": "do it", "depth": 0})


def test_an_agent_phrases_its_sub_task_and_refuses_bad_definitions() -> None:
    reviewer = Agent("reviewer", "Reviews.", task_template="Review this: {task}", max_turns=3)
    request = reviewer.request("the diff")
    assert request.task == "Review this: the diff" and request.max_turns == 3
    with pytest.raises(UsageError, match="must contain"):
        Agent("reviewer", "Reviews.", task_template="no placeholder")
    with pytest.raises(UsageError, match="needs a description"):
        Agent("reviewer", " ")
    with pytest.raises(UsageError, match="not a string"):
        Agent("reviewer", "Reviews.", tools="read_file")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_resumed_parent_at_its_limit_takes_the_finished_child_it_started() -> None:
    store = FakeTaskStore()
    runs = NestedAgents(
        task_store=store,
        event_bus=InProcessEventBus(),
        execute=None,  # type: ignore[arg-type]  # nothing may start
        resume=None,  # type: ignore[arg-type]
        cancel=None,  # type: ignore[arg-type]
    )
    child_id = child_task_id("root", "call-1")
    now = datetime.now(UTC)
    # Ended before the crash, with its siblings' spending the parent's limit is reached now.
    store.tasks[child_id] = TaskState(
        task_id=child_id,
        session_id="c",
        trace_id="t",
        status=TaskStatus.SUCCEEDED,
        request=TaskRequest(task="x"),
        output="deployed",
        usage=TokenUsage(input_tokens=300),
        created_at=now,
        updated_at=now,
    )

    async def emit(*args: object, **fields: object) -> None:
        return None

    parent = ExecutionContext(
        task=TaskIdentity(
            task_id="root",
            session_id="s",
            trace_id="t",
            request=TaskRequest(task="y"),
            max_turns=5,
            limits=UsageLimits(total_tokens=1000),
        ),
        run=RunState(messages=[], resuming=True),
        emit=emit,  # type: ignore[arg-type]
    )
    parent.run.stats.usage = TokenUsage(input_tokens=1000)
    result = await runs.run(parent, Agent("helper", "Helps."), "x", key="call-1")
    assert result.status is TaskStatus.SUCCEEDED and result.output == "deployed"
    assert parent.run.stats.usage.input_tokens == 1300  # owed, not forgotten
