from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from shared.agent_protocol import (
    PROTOCOL_ADAPTER,
    AssistantMessage,
    RiskLevel,
    TaskRequest,
    ToolCall,
    ToolCompleted,
    ToolResult,
    protocol_json_schema,
)


def test_messages_round_trip_through_the_single_adapter() -> None:
    event = ToolCompleted(
        event_id="e",
        task_id="t",
        seq=3,
        occurred_at=datetime.now(UTC),
        latency_ms=1.5,
        result=ToolResult(call_id="c", name="calc", content="4"),
    )
    message = AssistantMessage(
        content=None, tool_calls=(ToolCall(id="c", name="calc", arguments={"x": 1}),)
    )
    for item in (event, message, TaskRequest(task="hi")):
        assert PROTOCOL_ADAPTER.validate_json(PROTOCOL_ADAPTER.dump_json(item)) == item


def test_schema_covers_every_kind() -> None:
    schema = protocol_json_schema()
    kinds = set(schema["$defs"]["ProtocolMessage"]["discriminator"]["mapping"])
    assert {
        "task_request",
        "task_state",
        "task_result",
        "tool_call",
        "tool_result",
        "approval_request",
        "approval_decision",
        "task.queued",
        "task.succeeded",
        "task.failed",
        "llm.delta",
        "tool.started",
        "tool.completed",
    } <= kinds


def test_unknown_kinds_and_empty_tasks_are_rejected() -> None:
    with pytest.raises(ValidationError):
        PROTOCOL_ADAPTER.validate_python({"kind": "task.exploded"})
    with pytest.raises(ValidationError):
        TaskRequest(task="")


def test_risk_levels_are_ordered() -> None:
    assert RiskLevel.CRITICAL.at_least(RiskLevel.HIGH)
    assert not RiskLevel.MEDIUM.at_least(RiskLevel.HIGH)
    assert sorted(RiskLevel, key=lambda r: r.rank)[0] is RiskLevel.LOW
