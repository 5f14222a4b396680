"""Cancel and time limits stop work: across processes, and for tools that cannot be interrupted.

Two kernels on one SQLite database stand for two processes: the cancel travels through the
database only (a request on the task's row that the owner's watch sees).
"""

import threading
import time
from pathlib import Path

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.tool import ToolContext
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from providers.sqlite.tool_call_ledger import SqliteToolCallLedger
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio


def kernel_on(data_dir: Path, tools: list[FunctionTool], turns: list[ScriptedTurn]):  # type: ignore[no-untyped-def]
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": data_dir,
                "workspace_roots": (data_dir,),
                "cancel_check_s": 0.05,
                "task_lease_s": 3.0,
                "recovery": "off",
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(turns))
    container.tool_registry.override(ToolRegistry(tools))
    return container.kernel()


def call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


async def test_a_cancel_from_another_process_ends_the_task_once_and_the_host_gets_a_result(
    tmp_path: Path,
) -> None:
    started = anyio.Event()

    async def wait_forever() -> str:
        """Wait for something that never comes."""
        started.set()
        await anyio.sleep(3600)
        return "never"

    host = kernel_on(tmp_path, [FunctionTool(wait_forever)], [call("wait_forever")])
    other = kernel_on(tmp_path, [], [])
    async with host, other:
        results = []

        async def run() -> None:
            results.append(await host.execute_task(TaskRequest(task="wait", force_mode="react")))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            (running,) = await other.list_tasks(status=TaskStatus.RUNNING)
            assert running.owner == host.owner
            await other.cancel_task(running.task_id, "the user closed the window")
            # Only asked: the owner carries it out.
            assert (await other.get_task(running.task_id)).status is TaskStatus.RUNNING
        (result,) = results
        assert result.status is TaskStatus.CANCELED
        assert result.error == "the user closed the window"
        events = await other.task_events(result.task_id)
        assert [e.kind for e in events].count("task.canceled") == 1
        stored = await other.get_task(result.task_id)
        assert stored.status is TaskStatus.CANCELED and stored.owner is None


async def test_a_sync_tool_cut_by_its_time_limit_is_waited_for_and_its_effect_recorded(
    tmp_path: Path,
) -> None:
    effects = tmp_path / "effects.txt"

    def slow_write(text: str, context: ToolContext) -> str:
        """Write a line, slowly.

        Args:
            text: The line.
        """
        time.sleep(0.8)
        effects.write_text(text)
        return f"wrote {text}"

    tool = FunctionTool(slow_write, timeout_s=0.2)
    kernel = kernel_on(
        tmp_path, [tool], [call("slow_write", text="hello"), ScriptedTurn(content="done")]
    )
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="write", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED
    (completed,) = [e for e in events if e.kind == "tool.completed"]
    # Not reported while it ran: when the model heard of the time limit, the write had landed
    # and the model was told so.
    assert completed.result.error_type == "ToolTimeoutError"
    assert "later at most: wrote hello" in completed.result.content
    assert effects.read_text() == "hello"
    ledger = SqliteToolCallLedger(tmp_path / "core_agent.db")
    try:
        (entry,) = await ledger.entries(result.task_id)
    finally:
        await ledger.close()
    assert entry.status == "timed_out"
    assert "wrote hello" in (entry.note or "")


async def test_a_cancel_that_comes_as_a_step_stops_for_a_human_ends_the_task(tmp_path) -> None:
    # Another process asks to cancel (the request is stored) just as the run reaches a call
    # that needs approval: the task must end canceled, never wait for an approval that
    # would run the call after the host pressed stop.
    from core_agent import AgentSettings, tool_hook

    container = KernelContainer()
    container.settings.override(
        AgentSettings(data_dir=tmp_path, policy_approval_required_risk="low")
    )
    store = container.task_store()

    async def stop_from_elsewhere(call, context) -> None:  # type: ignore[no-untyped-def]
        await store.request_cancel(context.task_id, "stopped from another process")

    kernel = container.kernel()
    kernel.add_tool_hook(tool_hook(before=stop_from_elsewhere))
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="What is 6 * 7?"))
        assert result.status is TaskStatus.CANCELED, result
        assert await kernel.pending_approvals() == []


async def test_a_sync_tool_ending_after_its_task_is_recorded_as_ended_late(
    tmp_path: Path,
) -> None:
    # The kernel stops waiting (time limit, then its grace), the task goes on and ends; the
    # thread ends later still. The ledger says so: the task's run (and its lease check) is
    # over, and this record is no part of it.
    release = threading.Event()

    def slow_write(text: str) -> str:
        """Write a line, very slowly.

        Args:
            text: The line.
        """
        release.wait(30)
        return f"wrote {text}"

    tool = FunctionTool(slow_write, timeout_s=0.1)
    kernel = kernel_on(
        tmp_path, [tool], [call("slow_write", text="hello"), ScriptedTurn(content="done")]
    )
    ledger = SqliteToolCallLedger(tmp_path / "core_agent.db")
    try:
        async with kernel:
            result = await kernel.execute_task(TaskRequest(task="write", force_mode="react"))
            assert result.status is TaskStatus.SUCCEEDED
            release.set()
            for _ in range(500):
                (entry,) = await ledger.entries(result.task_id)
                if "ended late" in (entry.note or ""):
                    break
                await anyio.sleep(0.01)
    finally:
        await ledger.close()
    assert entry.status == "timed_out" and entry.note == "ended late: wrote hello"


async def test_a_yes_to_running_a_cut_call_again_covers_that_attempt_only(tmp_path) -> None:
    # A host leaves mid-call (the ledger row: timed_out); recovery asks whether to run it
    # again, a human says yes, and that attempt is cut the same way. The next recovery must
    # ask again: the call ran a third time on the first yes.
    from shared.agent_protocol import ApprovalDecision

    charges: list[int] = []
    started = anyio.Event()

    def charge_tool(block: bool) -> FunctionTool:
        async def charge(amount: int) -> str:
            """Charge the card.

            Args:
                amount: How much.
            """
            charges.append(amount)
            started.set()
            if block:
                await anyio.sleep(3600)
            return "charged"

        return FunctionTool(charge, idempotent=False, capabilities={"write"})

    turns = [call("charge", amount=100), ScriptedTurn(content="charged")]
    first = kernel_on(tmp_path, [charge_tool(True)], turns)
    async with first, anyio.create_task_group() as group:
        group.start_soon(lambda: first.execute_task(TaskRequest(task="charge"), task_id="t"))
        await started.wait()
        first.leave_runs()
        group.cancel_scope.cancel()
    started = anyio.Event()
    second = kernel_on(tmp_path, [charge_tool(True)], turns)
    async with second:
        await second.recover("resume")
        (question,) = await second.pending_approvals()
        yes = ApprovalDecision(request_id=question.request_id, approved=True)
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: second.resolve_approval(question.request_id, yes))
            await started.wait()
            second.leave_runs()
            group.cancel_scope.cancel()
    assert charges == [100, 100]
    third = kernel_on(tmp_path, [charge_tool(False)], turns)
    async with third:
        await third.recover("resume")
        (again,) = await third.pending_approvals()
        assert again.rule == "ledger:uncertain" and again.request_id != question.request_id
    assert charges == [100, 100]
