"""Two tool calls of one answer under the same id are two calls, each with its own record.

Some providers and proxies repeat an id within one answer. The kernel keys a call by its id
(the ledger, the tool message, a nested agent's child task), so a repeat is renamed before
anything records it; through litellm's real client against the loopback server.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from core_agent import tool
from core_agent.container import create_kernel
from core_agent.contracts.settings import AgentSettings
from providers.sqlite.tool_call_ledger import SqliteToolCallLedger
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

EFFECTS: list[str] = []
BLOCKED: list[anyio.Event] = []


@tool(capabilities={"write"})
async def effect(x: str) -> str:
    """Do something that cannot be undone.

    Args:
        x: What to do.
    """
    EFFECTS.append(x)
    if x == "block":
        BLOCKED[0].set()
        await anyio.sleep(3600)  # the host goes away while this runs
    return f"effect {x} done"


def twin_calls(server: OpenAIServer) -> None:
    server.reply(
        None,
        tool_calls=[
            {"id": "dup", "name": "effect", "arguments": {"x": "one"}},
            {"id": "dup", "name": "effect", "arguments": {"x": "two"}},
        ],
    )


async def test_two_calls_with_one_id_each_run_and_answer_on_their_own(
    litellm_settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    EFFECTS.clear()
    twin_calls(openai_server)
    openai_server.reply("Both done.")

    async with create_kernel(litellm_settings, tools=[effect]) as kernel:
        result = await kernel.execute_task(TaskRequest(task="Do both.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert sorted(EFFECTS) == ["one", "two"]
    sent = openai_server.requests[1]["messages"]
    (asked,) = [m for m in sent if m["role"] == "assistant"]
    ids = [call["id"] for call in asked["tool_calls"]]
    assert len(set(ids)) == 2 and ids[0] == "dup"
    answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert answers == {ids[0]: "effect one done", ids[1]: "effect two done"}
    ledger = SqliteToolCallLedger(Path(litellm_settings.data_dir) / "core_agent.db")
    try:
        entries = await ledger.entries(result.task_id)
    finally:
        await ledger.close()
    assert sorted((e.call_id, e.status) for e in entries) == [
        (ids[0], "finished"),
        (ids[1], "finished"),
    ]


async def test_a_twin_call_cut_by_a_crash_is_not_given_its_twins_result(
    litellm_settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    # The first call finished, the second was running when the host went away: on resume,
    # the second may or may not have happened, which only a human can tell (it used to be
    # answered with the first one's result).
    EFFECTS.clear()
    openai_server.reply(
        None,
        tool_calls=[
            {"id": "dup", "name": "effect", "arguments": {"x": "one"}},
            {"id": "dup", "name": "effect", "arguments": {"x": "block"}},
        ],
    )
    settings = litellm_settings.model_copy(update={"recovery": "off"})
    BLOCKED[:] = [anyio.Event()]
    async with create_kernel(settings, tools=[effect]) as host, anyio.create_task_group() as group:
        group.start_soon(lambda: host.execute_task(TaskRequest(task="Do both."), task_id="t"))
        await BLOCKED[0].wait()
        host.leave_runs()
        group.cancel_scope.cancel()

    openai_server.reply("Done.")
    async with create_kernel(settings, tools=[effect]) as successor:
        (result,) = await successor.recover("resume")
        assert result.status is TaskStatus.WAITING_APPROVAL
        (request,) = await successor.pending_approvals()
        assert request.tool_call.arguments == {"x": "block"}
        resumed = await successor.resolve_approval(
            request.request_id,
            ApprovalDecision(request_id=request.request_id, approved=False, reason="it ran"),
        )
    assert resumed.status is TaskStatus.SUCCEEDED
    assert EFFECTS == ["one", "block"]  # nothing ran twice
