"""How a running task ends when its host cancels it or loses it while a human is asked.

The kernel's driver (``core_agent.kernel.task_driver``) keeps a task registered while its
host's approver is asked about a call, so a cancel reaches it then too; and a run whose
approval request was decided elsewhere (or whose task ended elsewhere) stops instead of
carrying on with an answer that is not the recorded one.
"""

from pathlib import Path

import anyio
import pytest
from dependency_injector import providers

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.orchestration.react_executor import ReActExecutor
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeTaskStore, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, TaskRequest, TaskStatus

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
