"""The protocol as one discriminated union, and its JSON Schema for non-Python hosts."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter

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
    """JSON Schema (draft 2020-12) of every protocol message, keyed by ``kind``."""
    schema = PROTOCOL_ADAPTER.json_schema()
    schema["title"] = "core-agent protocol"
    return schema
