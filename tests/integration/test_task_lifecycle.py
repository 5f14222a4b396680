"""How a running task ends when its host cancels it or loses it while a human is asked.

The kernel's driver (``core_agent.kernel.task_driver``) keeps a task registered while its
host's approver is asked about a call, so a cancel reaches it then too; and a run whose
approval request was decided elsewhere (or whose task ended elsewhere) stops instead of
carrying on with an answer that is not the recorded one.
"""

import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from dependency_injector import providers

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.orchestration.react_executor import ReActExecutor
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeMemoryStore, FakeTaskStore, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from providers.sqlite.task_store import SqliteTaskStore
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    StrategyMode,
    TaskQueued,
    TaskRequest,
    TaskState,
    TaskStatus,
)

pytestmark = pytest.mark.anyio
launched: list[str] = []


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (high risk: exec, so a human is asked first)."""
    launched.append(target)
    return f"launched {target}"


def launch_then_answer() -> list[ScriptedTurn]:
    return [
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="launch", arguments={"target": "x"})]),
        ScriptedTurn(content="done"),
    ]


async def test_a_cancel_while_the_hosts_approver_is_asked_ends_the_task_canceled(
    tmp_path: Path,
) -> None:
    launched.clear()
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(update={"data_dir": tmp_path, "recovery": "off"})
    )
    container.llm_gateway.override(ScriptedLLMGateway(launch_then_answer()))
    container.tool_registry.override(ToolRegistry([launch]))
    kernel = container.kernel()
    asked = anyio.Event()
    interrupted: list[str] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.set()
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            interrupted.append(request.request_id)
            raise
        raise AssertionError("never answered")

    kernel.set_approval_callback(approver)
    results = []
    async with kernel:
        with anyio.fail_after(60):  # a hang guard, not a timing claim
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    results.append(await kernel.execute_task(TaskRequest(task="go")))

                group.start_soon(run)
                await asked.wait()
                (waiting,) = await kernel.list_tasks(status=TaskStatus.WAITING_APPROVAL)
                await kernel.cancel_task(waiting.task_id, "the user closed the dialog")
        (result,) = results
        assert result.status is TaskStatus.CANCELED
        assert result.error == "the user closed the dialog"
        assert interrupted and launched == []
        assert (await kernel.get_task(result.task_id)).status is TaskStatus.CANCELED


async def test_a_run_whose_request_was_decided_elsewhere_stops_without_calling_the_model(
    container: KernelContainer,
) -> None:
    """Without checkpoints the run asks its host in place; its task then ends elsewhere."""
    launched.clear()
    tasks, traces = FakeTaskStore(), FakeTraceStore()
    container.task_store.override(tasks)
    container.trace_store.override(traces)
    container.react_executor.override(providers.Singleton(ReActExecutor, loop=container.react_loop))
    container.llm_gateway.override(ScriptedLLMGateway(launch_then_answer()))
    container.tool_registry.override(ToolRegistry([launch]))
    kernel = container.kernel()

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        # Meanwhile another process ended the task (its owner was taken for dead).
        state = await tasks.get_task(request.task_id)
        await tasks.transition(
            request.task_id, from_status=state.status, to_status=TaskStatus.CANCELED
        )
        return ApprovalDecision(request_id=request.request_id, approved=True, decided_by="me")

    kernel.set_approval_callback(approver)
    result = await kernel.execute_task(TaskRequest(task="go", force_mode="react"))
    assert result.status is TaskStatus.CANCELED
    assert launched == []
    # The run stopped: the model was not asked to go on after the lost decision.
    kinds = [event.kind for event in tasks.events[result.task_id]]
    assert kinds.count("llm.completed") == 1, "\n".join(kinds)


def sqlite_kernel(data_dir: Path, turns: list[ScriptedTurn], **settings: object):  # type: ignore[no-untyped-def]
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": data_dir, "recovery": "off", "cancel_check_s": 0.2, **settings}
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(turns))
    container.tool_registry.override(ToolRegistry([launch]))
    return container


async def test_leaving_the_stream_while_the_approver_is_asked_cancels_the_task(
    tmp_path: Path,
) -> None:
    launched.clear()
    kernel = sqlite_kernel(tmp_path, launch_then_answer()).kernel()

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        await anyio.sleep(3600)
        raise AssertionError("never answered")

    kernel.set_approval_callback(approver)
    async with kernel:
        with anyio.fail_after(60):  # a hang guard, not a timing claim
            async with contextlib.aclosing(kernel.stream_task(TaskRequest(task="go"))) as events:
                async for event in events:
                    if event.kind == "task.waiting_approval":
                        break
        (task,) = await kernel.list_tasks()
        # Not left waiting for a decision that would run the call after the host gave up.
        assert task.status is TaskStatus.CANCELED and task.owner is None
        assert await kernel.pending_approvals() == []
    assert launched == []


async def test_a_caller_cancelled_before_the_run_begins_leaves_no_task_running(
    tmp_path: Path,
) -> None:
    """Recalling memories (or fitting a session) comes before the run, and may be slow."""
    launched.clear()
    gate = anyio.Event()

    class SlowMemory(FakeMemoryStore):
        async def search(self, scope, namespace, query, limit=10):  # type: ignore[no-untyped-def]
            gate.set()
            await anyio.sleep(3600)
            return []

    container = sqlite_kernel(tmp_path, launch_then_answer())
    container.memory_store.override(SlowMemory())
    kernel = container.kernel()
    async with kernel:
        async with anyio.create_task_group() as group:
            group.start_soon(kernel.execute_task, TaskRequest(task="go", force_mode="react"))
            await gate.wait()
            group.cancel_scope.cancel()
        (task,) = await kernel.list_tasks()
        assert task.status is TaskStatus.CANCELED and task.owner is None
        assert await kernel.recover("resume") == []
    assert launched == []


async def test_a_recovered_task_that_breaks_harms_neither_the_others_nor_the_host(
    tmp_path: Path,
) -> None:
    class Executor(IExecutor):
        @property
        def strategy(self) -> StrategyMode:
            return "react"

        async def run(self, context: ExecutionContext) -> ExecutionOutcome:
            if context.task.request.task == "buggy":
                raise RuntimeError("a bug in the executor")
            await anyio.sleep(0.2)
            return ExecutionOutcome(output=f"{context.task.request.task} done")

    store = SqliteTaskStore(tmp_path / "core_agent.db")
    past = datetime.now(UTC) - timedelta(minutes=5)
    for name in ("buggy", "healthy"):
        task_id, request = uuid.uuid4().hex, TaskRequest(task=name, force_mode="react")
        state = TaskState(
            task_id=task_id,
            session_id=uuid.uuid4().hex,
            trace_id=uuid.uuid4().hex,
            status=TaskStatus.RUNNING,
            strategy="react",
            request=request,
            created_at=past,
            updated_at=past,
            owner="elsewhere/x/1:1:dead",
            lease_expires_at=past,
        )
        queued = TaskQueued(
            event_id=uuid.uuid4().hex,
            task_id=task_id,
            seq=1,
            occurred_at=past,
            session_id=state.session_id,
            trace_id=state.trace_id,
            request=request,
        )
        await store.create_task(state, queued)
    await store.close()

    container = sqlite_kernel(tmp_path, [], recovery="resume")
    container.react_executor.override(providers.Object(Executor()))
    kernel = container.kernel()
    async with kernel:  # recovery runs in the background; its failure must not end up here
        host = await kernel.execute_task(TaskRequest(task="host task", force_mode="react"))
        with anyio.fail_after(60):  # a hang guard, not a timing claim
            while len(await kernel.list_tasks(status=TaskStatus.RUNNING)) > 0:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        ended = {t.request.task: t.status for t in await kernel.list_tasks()}
    assert host.status is TaskStatus.SUCCEEDED
    assert ended == {
        "buggy": TaskStatus.FAILED,
        "healthy": TaskStatus.SUCCEEDED,
        "host task": TaskStatus.SUCCEEDED,
    }


class _Halt(BaseException):
    """A host's own BaseException, outside Exception like SystemExit."""


@pytest.mark.parametrize("raised", [SystemExit(5), _Halt("halted")], ids=lambda e: type(e).__name__)
async def test_a_run_raising_a_base_exception_fails_its_task_not_cancels_it(
    tmp_path: Path, raised: BaseException
) -> None:
    # Past the boundary of the code that raised it (an executor of the host's, say): still a
    # failure with the reason, not "the caller was canceled" nor the host's exit.
    class Executor(IExecutor):
        @property
        def strategy(self) -> StrategyMode:
            return "react"

        async def run(self, context: ExecutionContext) -> ExecutionOutcome:
            raise raised

    container = sqlite_kernel(tmp_path, [])
    container.react_executor.override(providers.Object(Executor()))
    kernel = container.kernel()
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="go", force_mode="react"))
        stored = await kernel.get_task(result.task_id)
    expected = f"the run raised {type(raised).__name__}: {raised}"
    assert result.status is TaskStatus.FAILED and result.error == expected
    assert stored.status is TaskStatus.FAILED and stored.error == expected
