"""A task records its workspace and sandbox settings, and keeps them whoever resumes it."""

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from core_agent.container import KernelContainer
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ApprovalDecision,
    ChatMessage,
    TaskRequest,
    TaskStatus,
    ToolMessage,
)

pytestmark = pytest.mark.anyio


def touches(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    if any(isinstance(m, ToolMessage) for m in messages):
        return ScriptedTurn(content="done")
    return ScriptedTurn(
        tool_calls=[
            ScriptedToolCall(name="run_command", arguments={"command": "touch made-here.txt"})
        ]
    )


def kernel_in(tmp_path: Path, workspace: Path) -> object:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"workspace_roots": (workspace,), "data_dir": tmp_path / "data"}
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=touches))
    return container.kernel()


async def test_an_approval_resolved_elsewhere_runs_in_the_tasks_own_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    kernel = kernel_in(tmp_path, first)
    async with kernel:
        waiting = await kernel.execute_task(TaskRequest(task="Make a file.", force_mode="react"))
        assert waiting.status is TaskStatus.WAITING_APPROVAL  # touch is not a read-only command
        state = await kernel.get_task(waiting.task_id)
    assert state.sandbox is not None and state.sandbox["roots"] == [str(first)]

    # Another process, configured for another workspace and started elsewhere, resolves it.
    monkeypatch.chdir(second)
    other = kernel_in(tmp_path, second)
    async with other:
        (pending,) = await other.pending_approvals()
        done = await other.resolve_approval(
            pending.request_id, ApprovalDecision(request_id=pending.request_id, approved=True)
        )
    assert done.status is TaskStatus.SUCCEEDED
    assert (first / "made-here.txt").exists()
    assert not (second / "made-here.txt").exists()


async def test_a_request_can_name_its_own_workspace(tmp_path: Path) -> None:
    configured, requested = tmp_path / "configured", tmp_path / "requested"
    configured.mkdir()
    requested.mkdir()
    (requested / "notes.md").write_text("the requested workspace")

    def reads(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            return ScriptedTurn(content=results[-1].content)
        return ScriptedTurn(
            tool_calls=[ScriptedToolCall(name="read_file", arguments={"path": "notes.md"})]
        )

    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"workspace_roots": (configured,), "data_dir": tmp_path / "data"}
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=reads))
    kernel = container.kernel()
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(
                task="Read my notes.", force_mode="react", workspace_roots=(os.fspath(requested),)
            )
        )
        state = await kernel.get_task(result.task_id)
    assert "the requested workspace" in (result.output or "")
    assert state.sandbox is not None and state.sandbox["roots"] == [str(requested)]
