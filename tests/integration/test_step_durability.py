"""What a step has recorded is durable before its tool acts, and each result once it exists.

A ReAct step commits its records in one unit of work, but not all at its end: the model turn,
the call's start, its policy decision and the ledger's intent commit together before the tool
runs (a crash inside the tool loses none of them, and observers see the call start), and the
result commits with the checkpoint that uses it. When a turn runs several calls, each result
is committed as soon as its call ends, not when the slowest one does. The tools here look at
the database through a connection of their own, as another process would.
"""

import json
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from dependency_injector import providers

from core_agent import KernelContainer, tool
from core_agent.contracts.settings import AgentSettings
from core_agent.orchestration.react_executor import ReActExecutor
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from providers.sqlite.database import sqlite_driver
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio


def committed(database: Path) -> tuple[list[str], dict[str, str]]:
    """Event kinds and ledger statuses (by tool) another connection sees now."""
    conn = sqlite_driver().connect(str(database))
    try:
        kinds = [
            row[0]
            for row in conn.execute("SELECT event_type FROM agent_task_events ORDER BY rowid")
        ]
        ledger = {
            tool_name: status
            for tool_name, status in conn.execute("SELECT tool, status FROM agent_tool_calls")
        }
    finally:
        conn.close()
    return kinds, ledger


def kernel_in(data_dir: Path, tools: list, turns: list[ScriptedTurn], *, ledger: bool = True):  # type: ignore[no-untyped-def,type-arg]
    container = KernelContainer()
    container.settings.override(
        AgentSettings(
            data_dir=data_dir,
            task_store="sqlite",
            trace_store="sqlite",
            checkpoint_store="sqlite",
            tool_call_ledger="sqlite",
            recovery="off",
        )
    )
    if not ledger:  # an executor built without one (a third-party strategy, say)
        container.react_executor.override(
            providers.Singleton(
                ReActExecutor,
                loop=container.react_loop,
                checkpoints=container.redacted_checkpoint_store,
            )
        )
    container.tool_registry.override(ToolRegistry(tools))
    container.llm_gateway.override(ScriptedLLMGateway(turns))
    return container.kernel(), data_dir / "core_agent.db"


def one_call(name: str, **arguments: object) -> list[ScriptedTurn]:
    return [
        ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)]),
        ScriptedTurn(content="done"),
    ]


@pytest.mark.parametrize("ledger", [True, False], ids=["ledger", "no-ledger"])
async def test_the_steps_records_are_committed_before_its_tool_acts(
    tmp_path: Path, ledger: bool
) -> None:
    seen: list[tuple[list[str], dict[str, str]]] = []
    database = tmp_path / "core_agent.db"

    @tool
    async def look() -> str:
        """Look at what is committed."""
        seen.append(committed(database))
        return "looked"

    kernel, _ = kernel_in(tmp_path, [look], one_call("look"), ledger=ledger)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="look", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    ((kinds, calls),) = seen
    assert kinds[-3:] == ["llm.completed", "tool.started", "policy.decided"], kinds
    assert "tool.completed" not in kinds
    assert calls == ({"look": "started"} if ledger else {})
    kinds_after, calls_after = committed(database)
    assert kinds_after.count("tool.completed") == 1
    assert calls_after == ({"look": "finished"} if ledger else {})


async def test_each_result_of_a_turn_is_committed_when_its_call_ends(tmp_path: Path) -> None:
    database = tmp_path / "core_agent.db"
    fast_done = anyio.Event()
    seen_by_slow: list[tuple[list[str], dict[str, str]]] = []

    @tool
    async def fast() -> str:
        """Return at once."""
        fast_done.set()
        return "fast"

    @tool
    async def slow() -> str:
        """Return once the fast call's result is out."""
        await fast_done.wait()
        # Let the fast call's ending run (its result is recorded after it returns).
        for _ in range(50):
            await anyio.lowlevel.checkpoint()
            kinds, calls = committed(database)
            if calls.get("fast") == "finished":
                break
        seen_by_slow.append((kinds, calls))
        return "slow"

    turns = [
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall(name="slow", arguments={}),
                ScriptedToolCall(name="fast", arguments={}),
            ]
        ),
        ScriptedTurn(content="done"),
    ]
    kernel, _ = kernel_in(tmp_path, [fast, slow], turns)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="both", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    ((kinds, calls),) = seen_by_slow
    assert calls == {"fast": "finished", "slow": "started"}
    assert kinds.count("tool.completed") == 1
    conn = sqlite_driver().connect(str(database))
    try:
        (payload,) = conn.execute(
            "SELECT result_json FROM agent_tool_calls WHERE tool = 'fast'"
        ).fetchone()
    finally:
        conn.close()
    assert json.loads(payload)["content"] == "fast"
