"""The protocol as one discriminated union, and its JSON Schema for non-Python hosts.

The schema's root is the union of messages (by ``kind``); its ``$defs`` also hold the stdio
protocol's envelopes (``rpc``), and ``x-jsonrpc`` indexes them by method and notification.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from shared.agent_protocol.approval import ApprovalDecision, ApprovalRequest
from shared.agent_protocol.events import (
    AgentHandoff,
    ApprovalRequested,
    ApprovalResolved,
    InjectionSuspected,
    LLMCompleted,
    LLMDelta,
    PlanCreated,
    PlanStepCompleted,
    PlanStepStarted,
    PolicyDecided,
    StrategyFallback,
    StrategySelected,
    TaskCanceled,
    TaskFailed,
    TaskQueued,
    TaskResumed,
    TaskStarted,
    TaskSucceeded,
    TaskWaitingApproval,
    ToolCompleted,
    ToolHookApplied,
    ToolStarted,
)
from shared.agent_protocol.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
)
from shared.agent_protocol.rpc import RPC_METHODS, RPC_NOTIFICATIONS, ErrorCode, ErrorResponse
from shared.agent_protocol.tasks import TaskRequest, TaskResult, TaskState

ProtocolMessage = Annotated[
    TaskRequest
    | TaskState
    | TaskResult
    | SystemMessage
    | UserMessage
    | AssistantMessage
    | ToolMessage
    | ToolCall
    | ToolResult
    | ApprovalRequest
    | ApprovalDecision
    | TaskQueued
    | TaskStarted
    | StrategySelected
    | StrategyFallback
    | PlanCreated
    | PlanStepStarted
    | PlanStepCompleted
    | TaskWaitingApproval
    | TaskResumed
    | TaskSucceeded
    | TaskFailed
    | TaskCanceled
    | LLMDelta
    | LLMCompleted
    | ToolStarted
    | ToolCompleted
    | PolicyDecided
    | ToolHookApplied
    | InjectionSuspected
    | ApprovalRequested
    | ApprovalResolved
    | AgentHandoff,
    Field(discriminator="kind"),
]
"""Any message that crosses a layer or a process, told apart by its ``kind``."""

PROTOCOL_ADAPTER: TypeAdapter[ProtocolMessage] = TypeAdapter(ProtocolMessage)
"""The single serialization edge: ``validate_json`` in, ``dump_json`` out."""


def protocol_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the protocol: its messages and the stdio envelopes.

    The root is any of four unions, each in ``$defs``: ``ProtocolMessage`` (every message,
    told apart by ``kind``), ``RpcRequest`` (what a host sends the stdio server, by
    ``method``), ``RpcResponse`` and ``RpcNotification`` (what the server sends back). Every
    model is in ``$defs`` under its class name: each method's params, result, request and
    response (``ExecuteTaskRequest``, ``ExecuteTaskResponse``...), the notifications
    (``TaskEventNotification``...), ``ErrorResponse``. ``x-jsonrpc`` maps each method to
    its params, result and envelopes, and each notification to its envelope and params.
    """
    requests = [method.request for method in RPC_METHODS.values()]
    responses: list[type[BaseModel]] = [method.response for method in RPC_METHODS.values()]
    notifications = list(RPC_NOTIFICATIONS.values())
    models: list[type[BaseModel]] = [*requests, *responses, ErrorResponse, *notifications]
    for method in RPC_METHODS.values():
        models += [method.params, method.result]
    inputs: list[tuple[str, Literal["validation"], TypeAdapter[Any]]] = [
        ("protocol", "validation", PROTOCOL_ADAPTER)
    ]
    inputs += [
        (model.__name__, "validation", TypeAdapter(model)) for model in dict.fromkeys(models)
    ]
    # One generation for all, so every model has one definition and one name.
    keyed, shared = TypeAdapter.json_schemas(inputs)
    defs: dict[str, Any] = shared["$defs"]
    defs["ProtocolMessage"] = {
        "title": "ProtocolMessage",
        **keyed[("protocol", "validation")],
    }
    defs["RpcRequest"] = {
        "title": "RpcRequest",
        "oneOf": [_ref(model.__name__) for model in requests],
        "discriminator": {
            "propertyName": "method",
            "mapping": {name: _ref(m.request.__name__)["$ref"] for name, m in RPC_METHODS.items()},
        },
    }
    # Responses carry no method: a host tells them apart by the id of its request.
    answers: list[type[BaseModel]] = [*responses, ErrorResponse]
    defs["RpcResponse"] = {
        "title": "RpcResponse",
        "anyOf": [_ref(model.__name__) for model in answers],
    }
    defs["RpcNotification"] = {
        "title": "RpcNotification",
        "oneOf": [_ref(model.__name__) for model in notifications],
        "discriminator": {
            "propertyName": "method",
            "mapping": {name: _ref(m.__name__)["$ref"] for name, m in RPC_NOTIFICATIONS.items()},
        },
    }
    union_names = ("ProtocolMessage", "RpcRequest", "RpcResponse", "RpcNotification")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "core-agent protocol",
        "anyOf": [_ref(name) for name in union_names],
        "$defs": defs,
        "x-jsonrpc": _rpc_index(),
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _rpc_index() -> dict[str, Any]:
    return {
        "version": "2.0",
        "framing": "one JSON message per line, UTF-8, each ending with \\n",
        "methods": {
            name: {
                "params": _ref(method.params.__name__),
                "result": _ref(method.result.__name__),
                "request": _ref(method.request.__name__),
                "response": _ref(method.response.__name__),
                "description": (method.request.__doc__ or "").strip(),
            }
            for name, method in RPC_METHODS.items()
        },
        "notifications": {
            name: {
                "notification": _ref(model.__name__),
                "params": {"$ref": f"#/$defs/{model.__name__}/properties/params"},
                "description": " ".join((model.__doc__ or "").split()),
            }
            for name, model in RPC_NOTIFICATIONS.items()
        },
        "error": _ref(ErrorResponse.__name__),
        "error_codes": {str(code.value): code.name for code in ErrorCode},
    }
