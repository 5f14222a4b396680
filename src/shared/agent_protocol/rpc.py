"""The stdio protocol: JSON-RPC 2.0 envelopes around the protocol messages, one per line.

A host (an Electron or Tauri app, any program) starts ``core-agent serve --stdio`` and writes
requests to its stdin, one JSON object per line (UTF-8, each ending with a newline); the server
writes responses and notifications to its stdout the same way. Params and results are the
protocol's own messages where one fits (``TaskRequest``, ``TaskState``, ``ApprovalDecision``,
``ApprovalRequest``, ``TaskResult``, the ``AgentEvent`` union) and small models here where
none does.

Each method has a request and a response envelope named after it (``ExecuteTaskRequest``,
``ExecuteTaskResponse``...), and ``RPC_METHODS`` maps method names to them; the three
notifications the server sends are ``TaskEventNotification``, ``ApprovalRequestedNotification``
and ``TaskResultNotification``. ``protocol_json_schema`` publishes all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from shared.agent_protocol.approval import ApprovalDecision, ApprovalRequest
from shared.agent_protocol.events import AgentEvent
from shared.agent_protocol.sessions import SessionInfo
from shared.agent_protocol.tasks import TaskRequest, TaskResult, TaskState, TaskStatus

JSONRPC_VERSION = "2.0"

RequestId = Annotated[int, Strict()] | Annotated[str, Strict()]
"""A request's id: a string or an integer (``true`` or ``"1"`` for ``1`` is refused)."""


class ErrorCode(IntEnum):
    """The ``code`` of an error response: JSON-RPC's own, then the server's (-32000 to -32099)."""

    PARSE_ERROR = -32700
    """The line is not JSON (or not UTF-8). The response's ``id`` is ``null``."""
    INVALID_REQUEST = -32600
    """Not a JSON-RPC 2.0 request: wrong member types, a batch, a line over the size limit,
    an ``id`` or member name that is not valid Unicode (a lone surrogate escape; such an id
    is answered with ``id`` ``null``), or an ``id`` already used by a request still in
    flight (then ``id`` is ``null`` and ``data.id`` is the id, so the answer cannot be taken
    for the first request's)."""
    METHOD_NOT_FOUND = -32601
    """No such method (an unknown notification is ignored, as the specification says)."""
    INVALID_PARAMS = -32602
    """The params do not validate (strictly: ``"yes"`` is no boolean, ``"10"`` no integer;
    text must be valid Unicode, no lone surrogate escape); ``message`` says why in one line,
    ``data.errors`` in full."""
    INTERNAL_ERROR = -32603
    """A bug in the server; the details are in its stderr."""
    USAGE_ERROR = -32001
    """The kernel refused the request: an unknown task, a request already decided, a task
    that already ended, a busy or closed session. ``data.type`` names the kernel's error."""
    KERNEL_ERROR = -32002
    """The kernel failed to carry the request out (a storage error, say)."""
    BUSY = -32003
    """``execute_task`` or ``resolve_approval`` while as many runs started by this
    connection are going as the server takes (``--max-tasks``). Nothing was done;
    ``data.limit`` is the limit. Send it again once a run has ended or stopped to wait for
    a human."""


def _envelope_members_required(schema: dict[str, Any]) -> None:
    # They have defaults for Python's sake, but every message on the wire carries them.
    required = schema.setdefault("required", [])
    for name in ("method", "jsonrpc"):
        if name in schema.get("properties", {}) and name not in required:
            required.insert(0, name)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Envelope(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_extra=_envelope_members_required
    )


class RpcError(_Model):
    """What went wrong with a request."""

    code: int = Field(description="An ErrorCode value.")
    message: str = Field(description="One line, for a human.")
    data: dict[str, Any] | None = Field(
        default=None,
        description="Details: 'type' (the kernel's error class), 'errors' (params validation), "
        "'id' (a reused request id), 'limit_bytes' (an oversized line).",
    )


class ErrorResponse(_Envelope):
    """The answer to a request that failed."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId | None
    error: RpcError


# --- params and results --------------------------------------------------------------------


class TaskAccepted(_Model):
    """``execute_task``'s result: the task exists (queued) and runs in the background.

    The response comes before any notification of the task. Its events follow as
    ``task/event`` notifications, and each time its run stops (at its end, or to wait for a
    human) a ``task/result`` notification.
    """

    kind: Literal["task_accepted"] = "task_accepted"
    task_id: str
    session_id: str
    trace_id: str


class CancelTaskParams(_Model):
    """``cancel_task``'s params."""

    task_id: str
    reason: str = "canceled by the host"


class ApprovalAccepted(_Model):
    """``resolve_approval``'s result: the decision is recorded.

    When it was the task's last open request the task carries on in the background (an
    approval runs the call, a denial is shown to the model); its events follow as
    notifications, then a ``task/result``.
    """

    kind: Literal["approval_accepted"] = "approval_accepted"
    request_id: str
    task_id: str


class ListTasksParams(_Model):
    """``list_tasks``'s params: filters, newest first."""

    session_id: str | None = None
    status: TaskStatus | None = None
    limit: int = Field(default=50, ge=1, le=1000)


class TaskList(_Model):
    """``list_tasks``'s result."""

    tasks: list[TaskState]


class RetryFromTurnParams(_Model):
    """``retry_from_turn``'s params: run a turn of a session again (superseding it and after).

    Answered like ``execute_task`` (a ``TaskAccepted`` once the retrying task is stored).
    """

    session_id: str
    turn: int = Field(ge=1, description="The turn to run again, as the transcript numbers it.")
    task: str | None = Field(
        default=None, min_length=1, description="What to ask instead of the turn's own text."
    )


class ForkSessionParams(_Model):
    """``fork_session``'s params: a new session holding a session's history up to a turn."""

    session_id: str
    at_turn: int | None = Field(default=None, ge=1, description="The latest turn when absent.")
    new_session_id: str | None = Field(
        default=None, min_length=1, description="A random id when absent."
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="The origin's metadata when absent."
    )


class GetTaskParams(_Model):
    """``get_task``'s and ``get_trace``'s params."""

    task_id: str


class TraceSpan(_Model):
    """One finished step of a task: a model call, a tool call, a policy decision..."""

    span_id: str
    parent_span_id: str | None = None
    kind: str = Field(
        description="task (the root), run, planning, step, llm, llm_attempt, tool, hook, policy, "
        "approval, memory, retrieval"
    )
    name: str
    status: Literal["ok", "error"]
    started_at: datetime
    ended_at: datetime
    latency_ms: float
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    error: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)


class TaskTrace(_Model):
    """``get_trace``'s result: the task's spans in start order."""

    kind: Literal["task_trace"] = "task_trace"
    task_id: str
    trace_id: str
    status: TaskStatus
    spans: list[TraceSpan]


class ListPendingApprovalsParams(_Model):
    """``list_pending_approvals``'s params."""

    limit: int = Field(default=1000, ge=1, le=10_000)


class PendingApprovals(_Model):
    """``list_pending_approvals``'s result: the requests tasks wait on, oldest first."""

    requests: list[ApprovalRequest]


class PingParams(_Model):
    """``ping``'s params: none."""


class Pong(_Model):
    """``ping``'s result: an empty object."""


# --- requests (host to server) -------------------------------------------------------------


class _Request(_Envelope):
    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId


class ExecuteTaskRequest(_Request):
    """Start a task; answered at once with its id."""

    method: Literal["execute_task"] = "execute_task"
    params: TaskRequest


class CancelTaskRequest(_Request):
    """Cancel a task wherever it runs; it ends with a ``task.canceled`` event."""

    method: Literal["cancel_task"] = "cancel_task"
    params: CancelTaskParams


class ResolveApprovalRequest(_Request):
    """Answer an approval request; the task carries on in the background."""

    method: Literal["resolve_approval"] = "resolve_approval"
    params: ApprovalDecision


class ListTasksRequest(_Request):
    """Stored tasks, newest first."""

    method: Literal["list_tasks"] = "list_tasks"
    params: ListTasksParams = Field(default_factory=ListTasksParams)


class GetTaskRequest(_Request):
    """One stored task."""

    method: Literal["get_task"] = "get_task"
    params: GetTaskParams


class GetTraceRequest(_Request):
    """A task's spans."""

    method: Literal["get_trace"] = "get_trace"
    params: GetTaskParams


class ListPendingApprovalsRequest(_Request):
    """The approval requests tasks wait on (they survive restarts)."""

    method: Literal["list_pending_approvals"] = "list_pending_approvals"
    params: ListPendingApprovalsParams = Field(default_factory=ListPendingApprovalsParams)


class RetryFromTurnRequest(_Request):
    """Run a session's turn again as a new task; answered at once with its id."""

    method: Literal["retry_from_turn"] = "retry_from_turn"
    params: RetryFromTurnParams


class ForkSessionRequest(_Request):
    """Fork a session at a turn into a new session."""

    method: Literal["fork_session"] = "fork_session"
    params: ForkSessionParams


class PingRequest(_Request):
    """Does nothing: for health checks and round-trip measurements."""

    method: Literal["ping"] = "ping"
    params: PingParams = Field(default_factory=PingParams)


# --- responses (server to host) ------------------------------------------------------------


class _Response(_Envelope):
    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId


class ExecuteTaskResponse(_Response):
    """``execute_task`` succeeded."""

    result: TaskAccepted


class RetryFromTurnResponse(_Response):
    """``retry_from_turn`` succeeded: the retrying task is stored and runs."""

    result: TaskAccepted


class ForkSessionResponse(_Response):
    """``fork_session`` succeeded: the new session as stored."""

    result: SessionInfo


class CancelTaskResponse(_Response):
    """``cancel_task`` succeeded: the task as stored right after.

    ``canceled`` when it was canceled at once; ``running`` while its run stops (a
    ``task.canceled`` event follows).
    """

    result: TaskState


class ResolveApprovalResponse(_Response):
    """``resolve_approval`` succeeded."""

    result: ApprovalAccepted


class ListTasksResponse(_Response):
    """``list_tasks`` succeeded."""

    result: TaskList


class GetTaskResponse(_Response):
    """``get_task`` succeeded."""

    result: TaskState


class GetTraceResponse(_Response):
    """``get_trace`` succeeded."""

    result: TaskTrace


class ListPendingApprovalsResponse(_Response):
    """``list_pending_approvals`` succeeded."""

    result: PendingApprovals


class PingResponse(_Response):
    """``ping`` succeeded."""

    result: Pong


# --- notifications (server to host) --------------------------------------------------------


class TaskEventNotification(_Envelope):
    """An event of a task (every event the kernel publishes, of every task it runs)."""

    jsonrpc: Literal["2.0"] = "2.0"
    method: Literal["task/event"] = "task/event"
    params: AgentEvent


class ApprovalRequestedNotification(_Envelope):
    """A task waits for a human: answer with ``resolve_approval``.

    Sent once the task is ``waiting_approval`` and its run has stopped, so an answer sent
    on receipt is always taken; the ``approval.requested`` task event comes earlier.
    """

    jsonrpc: Literal["2.0"] = "2.0"
    method: Literal["approval/requested"] = "approval/requested"
    params: ApprovalRequest


class TaskResultNotification(_Envelope):
    """A run of a task stopped: at the task's end, or to wait for a human.

    When it waits, ``status`` is ``waiting_approval`` and ``pending_approval`` is set.
    """

    jsonrpc: Literal["2.0"] = "2.0"
    method: Literal["task/result"] = "task/result"
    params: TaskResult


@dataclass(frozen=True)
class RpcMethod:
    """One method: its params and result, and the envelopes that carry them."""

    name: str
    params: type[BaseModel]
    result: type[BaseModel]
    request: type[BaseModel]
    response: type[BaseModel]

    def parse_params(self, raw: str | bytes) -> BaseModel:
        """The params of a request from their JSON text, checked strictly.

        Strict as JSON is: ``"yes"`` is no boolean, ``"10"`` no integer, ``1.5`` no
        integer, while enums and times are read from their JSON forms. (Lax validation
        would take ``"approved": "yes"`` for an approval.)

        Raises:
            pydantic.ValidationError: They do not validate.
        """
        return self.params.model_validate_json(raw, strict=True)


RPC_METHODS: dict[str, RpcMethod] = {
    method.name: method
    for method in (
        RpcMethod(
            "execute_task", TaskRequest, TaskAccepted, ExecuteTaskRequest, ExecuteTaskResponse
        ),
        RpcMethod(
            "cancel_task", CancelTaskParams, TaskState, CancelTaskRequest, CancelTaskResponse
        ),
        RpcMethod(
            "resolve_approval",
            ApprovalDecision,
            ApprovalAccepted,
            ResolveApprovalRequest,
            ResolveApprovalResponse,
        ),
        RpcMethod("list_tasks", ListTasksParams, TaskList, ListTasksRequest, ListTasksResponse),
        RpcMethod("get_task", GetTaskParams, TaskState, GetTaskRequest, GetTaskResponse),
        RpcMethod("get_trace", GetTaskParams, TaskTrace, GetTraceRequest, GetTraceResponse),
        RpcMethod(
            "list_pending_approvals",
            ListPendingApprovalsParams,
            PendingApprovals,
            ListPendingApprovalsRequest,
            ListPendingApprovalsResponse,
        ),
        RpcMethod(
            "retry_from_turn",
            RetryFromTurnParams,
            TaskAccepted,
            RetryFromTurnRequest,
            RetryFromTurnResponse,
        ),
        RpcMethod(
            "fork_session", ForkSessionParams, SessionInfo, ForkSessionRequest, ForkSessionResponse
        ),
        RpcMethod("ping", PingParams, Pong, PingRequest, PingResponse),
    )
}
"""The methods a host may call, by name."""

RPC_NOTIFICATIONS: dict[str, type[BaseModel]] = {
    "task/event": TaskEventNotification,
    "approval/requested": ApprovalRequestedNotification,
    "task/result": TaskResultNotification,
}
"""The notifications the server sends, by method name."""
