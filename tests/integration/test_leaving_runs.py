"""A host that shuts down leaves its tasks for the next kernel instead of canceling them.

And a host may name a task before it exists (the stdio server answers with its id at once).
"""

import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import CorruptStateError, DefinitionNotLoadedError
from core_agent.kernel import task_recovery
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from providers.sqlite.task_store import SqliteTaskStore
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio

TURNS = [
    ScriptedTurn(tool_calls=[ScriptedToolCall(name="slow_read", arguments={})]),
    ScriptedTurn(content="read it"),
]


def kernel_on(data_dir: Path, tool: FunctionTool | ToolRegistry):  # type: ignore[no-untyped-def]
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": data_dir, "workspace_roots": (data_dir,), "recovery": "off"}
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(TURNS))
    container.tool_registry.override(
        tool if isinstance(tool, ToolRegistry) else ToolRegistry([tool])
    )
    return container.kernel()


async def test_a_left_run_keeps_its_task_for_the_next_kernel(tmp_path: Path) -> None:
    started = anyio.Event()
    calls: list[str] = []

    async def slow_read() -> str:
        """Read something slowly."""
        calls.append("slow_read")
        started.set()
        await anyio.sleep(3600 if len(calls) == 1 else 0)
        return "the text"

    tool = FunctionTool(slow_read, idempotent=True, capabilities={"read"})
    request = TaskRequest(task="read slowly", force_mode="react")
    host = kernel_on(tmp_path, tool)
    async with host:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: host.execute_task(request, task_id="chosen-by-the-host"))
            await started.wait()
            host.leave_runs()
            group.cancel_scope.cancel()
        left = await host.get_task("chosen-by-the-host")
        assert left.status is TaskStatus.RUNNING  # not canceled
        assert left.owner is None and left.lease_expires_at is None
        kinds = [e.kind for e in await host.task_events(left.task_id)]
        assert "task.canceled" not in kinds

    successor = kernel_on(tmp_path, tool)
    async with successor:
        (result,) = await successor.recover("resume")
    assert result.task_id == "chosen-by-the-host"
    assert result.status is TaskStatus.SUCCEEDED and result.output == "read it"
    assert calls == ["slow_read", "slow_read"]  # idempotent and unfinished: run again


def endless_read(started: anyio.Event) -> FunctionTool:
    """A read that tells ``started`` it began, and never ends."""

    async def slow_read() -> str:
        """Read something slowly."""
        started.set()
        await anyio.sleep(3600)
        return "never"

    return FunctionTool(slow_read, idempotent=True, capabilities={"read"})


def quick_read() -> FunctionTool:
    """The same read as ``endless_read``'s, answering at once (a successor's tool)."""

    async def slow_read() -> str:
        """Read something slowly."""
        return "the text"

    return FunctionTool(slow_read, idempotent=True, capabilities={"read"})


async def left_mid_tool(tmp_path: Path, task_id: str) -> None:
    """Leave task ``task_id`` running inside its (endless) tool, as a host that went away."""
    started = anyio.Event()
    host = kernel_on(tmp_path, endless_read(started))
    async with host, anyio.create_task_group() as group:
        group.start_soon(lambda: host.execute_task(TaskRequest(task="read"), task_id=task_id))
        await started.wait()
        host.leave_runs()
        group.cancel_scope.cancel()


async def test_without_leaving_a_canceled_caller_cancels_the_task(tmp_path: Path) -> None:
    started = anyio.Event()
    host = kernel_on(tmp_path, endless_read(started))
    async with host:
        async with anyio.create_task_group() as group:
            request = TaskRequest(task="read slowly", force_mode="react")
            group.start_soon(lambda: host.execute_task(request, task_id="t1"))
            await started.wait()
            group.cancel_scope.cancel()
        assert (await host.get_task("t1")).status is TaskStatus.CANCELED


async def left_in_session(tmp_path: Path, session_id: str) -> str:
    """A task of ``session_id`` that its host left running mid-tool; its id."""
    started = anyio.Event()
    host = kernel_on(tmp_path, endless_read(started))
    request = TaskRequest(task="把报告读一遍", session_id=session_id, force_mode="react")
    async with host, anyio.create_task_group() as group:
        group.start_soon(lambda: host.execute_task(request, task_id="left"))
        await started.wait()
        host.leave_runs()
        group.cancel_scope.cancel()
    return "left"


@pytest.mark.parametrize("ending", ["recover_fail", "cancel"])
async def test_a_left_task_ended_by_another_kernel_keeps_its_turn_in_the_session(
    tmp_path: Path, ending: str
) -> None:
    # Nobody runs the task any more to add its turn: whoever ends it does, so the session's
    # next task knows what was asked and that it got no answer.
    task_id = await left_in_session(tmp_path, "s")
    prompts: list[list[str]] = []

    def answer(messages):  # type: ignore[no-untyped-def]
        prompts.append([str(message.content) for message in messages])
        return ScriptedTurn(content="noted")

    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(update={"data_dir": tmp_path, "recovery": "off"})
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=answer))
    successor = container.kernel()
    async with successor:
        if ending == "recover_fail":
            (result,) = await successor.recover("fail")
            assert result.status is TaskStatus.FAILED
        else:
            await successor.cancel_task(task_id, "用户关掉了窗口")
        transcript = await successor.session_transcript("s")
        later = await successor.execute_task(
            TaskRequest(task="我刚才问了什么？", session_id="s", force_mode="react")
        )
    assert later.status is TaskStatus.SUCCEEDED
    turn = [str(entry.message.content) for entry in transcript.entries if entry.task_id == task_id]
    assert turn[0] == "把报告读一遍"
    status = "failed" if ending == "recover_fail" else "canceled"
    assert f"ended {status} without an answer" in turn[-1]
    assert "把报告读一遍" in prompts[-1] and any(status in text for text in prompts[-1])


async def test_one_damaged_task_does_not_keep_the_others_from_recovery(tmp_path: Path) -> None:
    both_started = anyio.Event()
    started: list[str] = []

    async def slow_read() -> str:
        """Read something slowly."""
        started.append("slow_read")
        if len(started) == 2:
            both_started.set()
        await anyio.sleep(3600)
        return "never"

    host = kernel_on(tmp_path, FunctionTool(slow_read, idempotent=True, capabilities={"read"}))
    request = TaskRequest(task="read slowly", force_mode="react")
    async with host, anyio.create_task_group() as group:
        for task_id in ("healthy", "damaged"):
            group.start_soon(lambda t=task_id: host.execute_task(request, task_id=t))
        await both_started.wait()
        host.leave_runs()
        group.cancel_scope.cancel()
    with sqlite3.connect(tmp_path / "core_agent.db") as db:
        db.execute("UPDATE agent_tasks SET input_json = '{bad' WHERE id = 'damaged'")

    async def slow_read_again() -> str:
        """Read something slowly."""
        return "the text"

    successor = kernel_on(
        tmp_path,
        FunctionTool(slow_read_again, name="slow_read", idempotent=True, capabilities={"read"}),
    )
    async with successor:
        (result,) = await successor.recover("resume")
        listed = [task.task_id for task in await successor.list_tasks()]
        with pytest.raises(CorruptStateError, match="damaged"):
            await successor.get_task("damaged")
    assert result.task_id == "healthy" and result.status is TaskStatus.SUCCEEDED
    assert listed == ["healthy"]  # the damaged one is named on its own, not in the list


async def test_a_host_that_stalled_past_its_lease_writes_nothing_over_the_new_owner(
    tmp_path: Path,
) -> None:
    # The host stalls (asleep, stopped) while its tool runs; its lease runs out and another
    # kernel takes the task over and records the call's result. When the host wakes and its
    # tool returns, none of what it still had to write may land: not its result over the
    # recorded one, not its events (which used to fail raw: UNIQUE constraint).
    running, wake = anyio.Event(), anyio.Event()

    async def write_report() -> str:
        """Write the report."""
        running.set()
        await wake.wait()
        return "written by the stalled host"

    tool = FunctionTool(write_report, capabilities={"write"})
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": tmp_path, "recovery": "off", "task_lease_s": 600}
        )
    )
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [
                ScriptedTurn(tool_calls=[ScriptedToolCall(name="write_report", arguments={})]),
                ScriptedTurn(content="done"),
            ]
        )
    )
    container.tool_registry.override(ToolRegistry([tool]))
    host = container.kernel()
    async with host:
        async with anyio.create_task_group() as group:
            results = []

            async def run() -> None:
                request = TaskRequest(task="write the report", force_mode="react")
                results.append(await host.execute_task(request, task_id="t"))

            group.start_soon(run)
            await running.wait()
            events_before = len(await host.task_events("t"))
            with sqlite3.connect(tmp_path / "core_agent.db") as db:  # what the new owner did
                db.execute(
                    "UPDATE agent_tasks SET owner = 'other-host:1',"
                    " lease_expires_at = '2999-01-01T00:00:00+00:00' WHERE id = 't'"
                )
                db.execute(
                    "UPDATE agent_tool_calls SET status = 'finished',"
                    " result_json = '\"kept\"' WHERE task_id = 't'"
                )
            wake.set()
        (result,) = results
        events_after = len(await host.task_events("t"))
        stored = await host.get_task("t")
    assert result.status is TaskStatus.RUNNING
    assert "another kernel (other-host:1) took this task over" in (result.error or "")
    assert stored.owner == "other-host:1" and stored.status is TaskStatus.RUNNING
    assert events_after == events_before
    with sqlite3.connect(tmp_path / "core_agent.db") as db:
        assert db.execute("SELECT result_json FROM agent_tool_calls").fetchall() == [('"kept"',)]


async def test_a_task_left_inside_a_tool_is_resumed_only_where_that_tool_is(
    tmp_path: Path,
) -> None:
    # The application passed the tool to its kernel; `core-agent recover` in a shell has no
    # such tool. It must leave the task alone, not answer the interrupted call "unknown tool"
    # and go on (the call may or may not have happened).
    await left_mid_tool(tmp_path, "left")

    async def other_tool() -> str:
        """Something else."""
        return "other"

    elsewhere = kernel_on(tmp_path, FunctionTool(other_tool, capabilities={"read"}))
    async with elsewhere:
        assert await elsewhere.recover("resume") == []
        with pytest.raises(DefinitionNotLoadedError, match="slow_read"):
            await elsewhere.resume("left")
        assert (await elsewhere.get_task("left")).status is TaskStatus.RUNNING

    home = kernel_on(tmp_path, quick_read())
    async with home:
        (result,) = await home.recover("resume")
    assert result.status is TaskStatus.SUCCEEDED and result.output == "read it"


async def test_resuming_with_tools_from_a_slow_server_keeps_the_event_loop_running(
    tmp_path: Path,
) -> None:
    # The successor's tools come from a server that starts when they are first listed (MCP):
    # resume lists them to see whether the interrupted call's tool is here, and did so on the
    # event loop, which stalled every other task of the host while the server started.
    await left_mid_tool(tmp_path, "left")
    loop_ran = threading.Event()
    answered_while_starting: list[bool] = []

    def start_server() -> list[FunctionTool]:
        answered_while_starting.append(loop_ran.wait(5))
        return [quick_read()]

    registry = ToolRegistry()
    registry.defer(start_server)

    async def other_work() -> None:
        await anyio.sleep(0.05)
        loop_ran.set()

    successor = kernel_on(tmp_path, registry)
    async with successor, anyio.create_task_group() as group:
        group.start_soon(other_work)
        result = await successor.resume("left")
    assert result.status is TaskStatus.SUCCEEDED and result.output == "read it"
    assert answered_while_starting == [True]


async def test_resolving_with_tools_from_a_slow_server_keeps_the_event_loop_running(
    tmp_path: Path,
) -> None:
    # As above, for an approval answered by a kernel whose tools are not listed yet.
    async def slow_read() -> str:
        """Read something, asking first."""
        return "the text"

    asking = FunctionTool(slow_read, capabilities={"exec"})
    async with kernel_on(tmp_path, asking) as host:
        waiting = await host.execute_task(TaskRequest(task="read"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL and waiting.pending_approval
    loop_ran = threading.Event()
    answered_while_starting: list[bool] = []

    def start_server() -> list[FunctionTool]:
        answered_while_starting.append(loop_ran.wait(5))
        return [asking]

    registry = ToolRegistry()
    registry.defer(start_server)

    async def other_work() -> None:
        await anyio.sleep(0.05)
        loop_ran.set()

    decision = ApprovalDecision(request_id=waiting.pending_approval, approved=True)
    successor = kernel_on(tmp_path, registry)
    async with successor, anyio.create_task_group() as group:
        group.start_soon(other_work)
        result = await successor.resolve_approval(waiting.pending_approval, decision)
    assert result.status is TaskStatus.SUCCEEDED and result.output == "read it"
    assert answered_while_starting == [True]


async def test_older_orphans_that_cannot_be_recovered_here_do_not_hide_newer_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recovery takes orphans a batch at a time, oldest first: damaged rows, and tasks left
    # for a host with a tool this one lacks, must not fill every batch (they did at 100).
    monkeypatch.setattr(task_recovery, "BATCH", 1)
    await left_mid_tool(tmp_path, "healthy")
    with sqlite3.connect(tmp_path / "core_agent.db") as db:
        row = db.execute("SELECT * FROM agent_tasks WHERE id = 'healthy'").fetchone()
        columns = [c[1] for c in db.execute("PRAGMA table_info(agent_tasks)")]
        for n in range(3):  # older than it, and unreadable
            copy = dict(zip(columns, row, strict=True))
            copy.update(id=f"damaged{n}", input_json="{bad", created_at=f"2000-01-0{n + 1}")
            marks = ", ".join("?" * len(copy))
            db.execute(
                f"INSERT INTO agent_tasks ({', '.join(copy)}) VALUES ({marks})", list(copy.values())
            )

    async with kernel_on(tmp_path, quick_read()) as successor:
        results = await successor.recover("resume")
    assert [(r.task_id, r.status) for r in results] == [("healthy", TaskStatus.SUCCEEDED)]


class TakenOverBeforeItsEnd(SqliteTaskStore):
    """The SQLite task store, where another kernel takes a task over just before its run
    ends: its owner changes as the move out of ``running`` is asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.file = path

    async def transition(self, task_id: str, **move: Any) -> None:
        if move["from_status"] is TaskStatus.RUNNING:
            with sqlite3.connect(self.file) as db:  # what the new owner did
                db.execute(
                    "UPDATE agent_tasks SET owner = 'other-host:1',"
                    " lease_expires_at = '2999-01-01T00:00:00+00:00' WHERE id = ?",
                    (task_id,),
                )
        await super().transition(task_id, **move)


def asking_read() -> FunctionTool:
    """The read of ``quick_read``, which a human must approve first."""

    async def slow_read() -> str:
        """Read something, asking first."""
        return "the text"

    return FunctionTool(slow_read, capabilities={"exec"})


@pytest.mark.parametrize("ending", ["success", "waiting for a human", "cancel"])
async def test_a_host_that_stalled_before_its_ending_does_not_end_the_new_owners_task(
    tmp_path: Path, ending: str
) -> None:
    # The run's last step is stored; the host stalls before the ending, another kernel takes
    # the task over. Waking, the host must not end it (succeeded, waiting for a human,
    # canceled) over that kernel's run.
    started = anyio.Event()
    tools = {
        "success": quick_read(),
        "waiting for a human": asking_read(),
        "cancel": endless_read(started),
    }
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(update={"data_dir": tmp_path, "recovery": "off"})
    )
    container.llm_gateway.override(ScriptedLLMGateway(TURNS))
    container.tool_registry.override(ToolRegistry([tools[ending]]))
    container.task_store.override(TakenOverBeforeItsEnd(tmp_path / "core_agent.db"))
    async with container.kernel() as host:
        request = TaskRequest(task="read", force_mode="react")
        if ending == "cancel":
            async with anyio.create_task_group() as group:

                async def cancel_once_started() -> None:
                    await started.wait()
                    await host.cancel_task("t")

                group.start_soon(cancel_once_started)
                result = await host.execute_task(request, task_id="t")
        else:
            result = await host.execute_task(request, task_id="t")
        stored = await host.get_task("t")
        kinds = [e.kind for e in await host.task_events("t")]
    assert result.status is TaskStatus.RUNNING
    assert "another kernel (other-host:1) took this task over" in (result.error or "")
    assert stored.status is TaskStatus.RUNNING and stored.owner == "other-host:1"
    assert not {"task.succeeded", "task.canceled", "task.waiting_approval"} & set(kinds)
