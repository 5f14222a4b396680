"""The protocol as one discriminated union, and its JSON Schema for non-Python hosts.

The schema's root is the union of messages (by ``kind``); its ``$defs`` also hold the stdio
protocol's envelopes (``rpc``), and ``x-jsonrpc`` indexes them by method and notification.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from shared.agent_protocol.approval import ApprovalDecision, ApprovalRequest
from shared.agent_protocol.events import (
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
    | ApprovalResolved,
    Field(discriminator="kind"),
]
"""Any message that crosses a layer or a process, told apart by its ``kind``."""

PROTOCOL_ADAPTER: TypeAdapter[ProtocolMessage] = TypeAdapter(ProtocolMessage)
"""The single serialization edge: ``validate_json`` in, ``dump_json`` out."""


def protocol_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of every protocol message, keyed by ``kind``.

    Every model is in ``$defs`` under its class name, the stdio protocol's too: each method's
    request and response envelopes (``ExecuteTaskRequest``, ``ExecuteTaskResponse``...), the
    notifications (``TaskEventNotification``...) and ``ErrorResponse``. ``x-jsonrpc`` maps
    each method to its params, result and envelopes, and each notification to its envelope
    and params, as ``$ref`` pointers into ``$defs``.
    """
    envelopes: list[type[BaseModel]] = [ErrorResponse, *RPC_NOTIFICATIONS.values()]
    for method in RPC_METHODS.values():
        envelopes += [method.params, method.result, method.request, method.response]
    inputs: list[tuple[str, Literal["validation"], TypeAdapter[Any]]] = [
        ("protocol", "validation", PROTOCOL_ADAPTER)
    ]
    inputs += [
        (model.__name__, "validation", TypeAdapter(model)) for model in dict.fromkeys(envelopes)
    ]
    # One generation for all, so every model has one definition and one name.
    keyed, shared = TypeAdapter.json_schemas(inputs)
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "core-agent protocol",
        **keyed[("protocol", "validation")],
        "$defs": shared["$defs"],
    }
    schema["x-jsonrpc"] = _rpc_index()
    return schema


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
