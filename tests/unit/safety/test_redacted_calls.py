"""The rule for calls read back from the stores (``refuse_redacted_call``), and where the tool
runner applies it (``screen``): before anything acts on the call, never to a call whose
result the ledger already holds."""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from core_agent import tool
from core_agent.contracts.errors import RedactedArgumentsError
from core_agent.contracts.tool import ITool, ToolContext
from core_agent.contracts.tool_call_ledger import LedgerEntry, LedgerStatus
from core_agent.safety.redaction import MARK, refuse_redacted_call
from core_agent.tooling.registry import ToolRegistry
from core_agent.tooling.tool_runner import ToolRunner
from shared.agent_protocol import ToolCall, ToolResult

pytestmark = pytest.mark.anyio
CTX = ToolContext(task_id="t", session_id="s", call_id="c")
ran: list[int] = []


@tool
def connect(port: int, url: str = "") -> str:
    """Connect."""
    ran.append(port)
    return "connected"


def test_the_refusal_names_every_place_of_the_mark() -> None:
    arguments = {
        "url": f"postgres://app:{MARK}@db/prod",
        "headers": {"Authorization": f"Bearer {MARK}", "Accept": "json"},
        "hosts": ["a", f"{MARK}"],
        f"{MARK}": "a key that was a secret",
    }
    with pytest.raises(RedactedArgumentsError) as caught:
        refuse_redacted_call("connect", arguments)
    assert caught.value.places == ("url", "headers.Authorization", "hosts[1]", MARK)
    assert caught.value.tool_name == "connect"
    refuse_redacted_call("connect", {"url": "postgres://app@db/prod", "note": "REDACTED"})


def screen(call: ToolCall, arguments: Mapping[str, Any]) -> None:
    refuse_redacted_call(call.name, arguments)


class _Ledger:
    """A ledger that holds a finished result for call ``done``."""

    def __init__(self) -> None:
        self.begun: list[str] = []

    def recorded(self, call: ToolCall) -> LedgerEntry | None:
        if call.id != "done":
            return None
        return LedgerEntry(
            idempotency_key="k",
            task_id="t",
            call_id=call.id,
            tool=call.name,
            arguments="{}",
            idempotent=True,
            status="finished",
            started_at=datetime.now(UTC),
            result=ToolResult(call_id=call.id, name=call.name, content="connected then"),
        )

    def reruns_safely(
        self, tool: ITool, arguments: Mapping[str, Any], context: ToolContext
    ) -> bool:
        return True

    async def begin(
        self, call: ToolCall, tool: ITool, arguments: Mapping[str, Any], *, idempotent: bool
    ) -> str:
        self.begun.append(call.id)
        return call.id

    async def finish(
        self, key: str, result: ToolResult, *, status: LedgerStatus = "finished", note: str = ""
    ) -> None:
        return None


async def test_a_stored_call_with_the_mark_is_refused_before_validation_and_the_ledger() -> None:
    ran.clear()
    runner = ToolRunner(ToolRegistry([connect]), default_timeout_s=5)
    ledger = _Ledger()
    # ``port`` lost its value to the redaction: the model reads why, not a schema error.
    call = ToolCall(id="1", name="connect", arguments={"port": MARK})
    result = await runner.run(call, CTX, ledger=ledger, screen=screen)
    assert result.error_type == "RedactedArgumentsError"
    assert "port" in result.content
    assert ran == [] and ledger.begun == []


async def test_a_call_the_ledger_finished_keeps_its_result() -> None:
    ran.clear()
    runner = ToolRunner(ToolRegistry([connect]), default_timeout_s=5)
    call = ToolCall(id="done", name="connect", arguments={"port": 5432, "url": MARK})
    result = await runner.run(call, CTX, ledger=_Ledger(), screen=screen)
    assert (result.content, result.is_error) == ("connected then", False)
    assert ran == []
