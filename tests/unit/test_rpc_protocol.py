"""The stdio protocol's messages and their published JSON Schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from shared.agent_protocol import (
    RPC_METHODS,
    RPC_NOTIFICATIONS,
    ApprovalDecision,
    ApprovalRequest,
    RiskLevel,
    TaskRequest,
    TaskStatus,
    ToolCall,
    protocol_json_schema,
)
from shared.agent_protocol.rpc import (
    ApprovalRequestedNotification,
    ExecuteTaskRequest,
    ListTasksParams,
    PingRequest,
)


@pytest.fixture(scope="module")
def schema() -> dict[str, object]:
    return protocol_json_schema()


def validator(schema: dict[str, object], ref: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": schema["$defs"], "$ref": ref})


def test_the_schema_is_valid_json_schema_and_its_root_reaches_every_message(schema) -> None:
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    unions = ["ProtocolMessage", "RpcRequest", "RpcResponse", "RpcNotification"]
    assert schema["anyOf"] == [{"$ref": f"#/$defs/{name}"} for name in unions]
    assert "task.succeeded" in schema["$defs"]["ProtocolMessage"]["discriminator"]["mapping"]
    assert set(schema["$defs"]["RpcRequest"]["discriminator"]["mapping"]) == set(RPC_METHODS)
    # Generators that start from the root (json-schema-to-typescript) reach every envelope.
    reached = json.dumps([schema["$defs"][name] for name in unions])
    for method in RPC_METHODS.values():
        for model in (method.request, method.response):
            assert f'"#/$defs/{model.__name__}"' in reached
    for model in RPC_NOTIFICATIONS.values():
        assert f'"#/$defs/{model.__name__}"' in reached
    root = Draft202012Validator(schema)
    assert root.is_valid({"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert root.is_valid({"kind": "task_request", "task": "hi"})
    assert not root.is_valid({"jsonrpc": "2.0", "id": 3, "method": "pong"})


def test_envelope_members_are_required_on_the_wire(schema) -> None:
    assert schema["$defs"]["ExecuteTaskRequest"]["required"][:2] == ["jsonrpc", "method"]
    assert schema["$defs"]["TaskEventNotification"]["required"][:2] == ["jsonrpc", "method"]
    assert schema["$defs"]["PingResponse"]["required"][0] == "jsonrpc"
    without_method = {"jsonrpc": "2.0", "id": 1, "params": {"task": "hi"}}
    assert not validator(schema, "#/$defs/ExecuteTaskRequest").is_valid(without_method)


def test_every_method_and_notification_is_found_by_name(schema) -> None:
    index = schema["x-jsonrpc"]
    assert set(index["methods"]) == {
        "execute_task",
        "cancel_task",
        "resolve_approval",
        "list_tasks",
        "get_task",
        "get_trace",
        "list_pending_approvals",
        "retry_from_turn",
        "fork_session",
        "ping",
    }
    assert set(index["notifications"]) == {"task/event", "approval/requested", "task/result"}
    refs = [ref for entry in index["methods"].values() for ref in entry.values() if "$ref" in ref]
    refs += [r for entry in index["notifications"].values() for r in entry.values() if "$ref" in r]
    for ref in [*refs, index["error"]]:
        path = ref["$ref"].removeprefix("#/").split("/")
        node = schema
        for part in path:
            node = node[part]  # resolves, or KeyError
    camel = {"execute_task": "ExecuteTask", "list_pending_approvals": "ListPendingApprovals"}
    for name in ("execute_task", "list_pending_approvals"):
        assert f"{camel[name]}Request" in schema["$defs"]
        assert f"{camel[name]}Response" in schema["$defs"]


def test_the_method_table_matches_the_envelopes() -> None:
    for name, method in RPC_METHODS.items():
        assert method.request.model_fields["method"].default == name
        assert method.request.model_fields["params"].annotation is method.params
        assert method.response.model_fields["result"].annotation is method.result
    for name, model in RPC_NOTIFICATIONS.items():
        assert model.model_fields["method"].default == name


def test_messages_made_in_python_validate_against_the_schema(schema) -> None:
    request = ExecuteTaskRequest(id=1, params=TaskRequest(task="总结这篇文章"))
    asked = ApprovalRequestedNotification(
        params=ApprovalRequest(
            request_id="r",
            task_id="t",
            session_id="s",
            tool_call=ToolCall(id="c", name="write_file", arguments={"path": "笔记.md"}),
            risk=RiskLevel.HIGH,
            created_at=datetime.now(UTC),
        )
    )
    for ref, message in (
        ("#/$defs/ExecuteTaskRequest", request),
        ("#/$defs/ApprovalRequestedNotification", asked),
        ("#/$defs/PingRequest", PingRequest(id="p")),
    ):
        document = json.loads(message.model_dump_json())
        assert not list(validator(schema, ref).iter_errors(document)), ref
    # Chinese text crosses unescaped, and comes back as it went.
    assert "总结这篇文章" in request.model_dump_json()
    assert ExecuteTaskRequest.model_validate_json(request.model_dump_json()) == request


def test_the_schema_refuses_what_the_server_refuses(schema) -> None:
    check = validator(schema, "#/$defs/ExecuteTaskRequest")
    good = {"jsonrpc": "2.0", "id": 1, "method": "execute_task", "params": {"task": "hi"}}
    assert check.is_valid(good)
    for bad in (
        {**good, "id": True},
        {**good, "jsonrpc": "1.0"},
        {**good, "params": {"task": ""}},
        {**good, "params": {"task": "hi", "colour": "red"}},
    ):
        assert not check.is_valid(bad), bad


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("resolve_approval", '{"request_id": "r", "approved": "yes"}', "approved"),
        ("resolve_approval", '{"request_id": "r", "approved": 1}', "approved"),
        ("list_tasks", '{"limit": "10"}', "limit"),
        ("list_tasks", '{"limit": 10.0}', "limit"),
        ("get_task", '{"task_id": 7}', "task_id"),
        ("execute_task", '{"task": "hi", "tools": "read_file"}', "tools"),
    ],
)
def test_params_are_parsed_strictly(method: str, params: str, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RPC_METHODS[method].parse_params(params)
    assert caught.value.errors()[0]["loc"] == (field,)


def test_strict_params_still_read_enums_and_times_from_json() -> None:
    listed = RPC_METHODS["list_tasks"].parse_params('{"status": "waiting_approval", "limit": 5}')
    assert listed == ListTasksParams(status=TaskStatus.WAITING_APPROVAL, limit=5)
    decision = RPC_METHODS["resolve_approval"].parse_params(
        '{"request_id": "r", "approved": true, "expires_at": "2999-01-01T00:00:00Z"}'
    )
    assert isinstance(decision, ApprovalDecision)
    assert decision.expires_at == datetime(2999, 1, 1, tzinfo=UTC)
