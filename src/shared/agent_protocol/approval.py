"""Approval requests shown to a human and the decisions that answer them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.agent_protocol.messages import ToolCall
from shared.agent_protocol.risk import RiskLevel

ApprovalScope = Literal["once", "task", "session", "pattern"]


class ApprovalRequest(BaseModel):
    """A risky tool call, or a question about a stuck task, waiting for a human decision.

    For a tool call, ``call_hash`` binds the request to the exact call: a decision applies to
    that hash only. Without a tool call, ``question`` says what the human is asked.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["approval_request"] = "approval_request"
    request_id: str
    task_id: str
    session_id: str
    tool_call: ToolCall | None = None
    call_hash: str | None = None
    question: str = ""
    risk: RiskLevel
    rule: str | None = Field(default=None, description="The policy rule that graded the call.")
    reason: str = ""
    created_at: datetime
    expires_at: datetime | None = None
    tainted: bool | None = Field(
        default=None,
        description="Whether untrusted content was in the task when the call was judged "
        "(what a wider-scoped approval of it may then cover); None in requests stored "
        "before it was recorded.",
    )


class ApprovalDecision(BaseModel):
    """A human's answer to one approval request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["approval_decision"] = "approval_decision"
    request_id: str
    approved: bool
    scope: ApprovalScope = Field(
        default="once",
        description="How far an approval reaches: 'once' this call; 'task' this call and the "
        "same call (same tool, same arguments) later in the task; 'session' the same call in "
        "any task of the session; 'pattern' the calls matching 'pattern'. A wider scope never "
        "covers a call graded riskier than the approved one, nor a call judged with untrusted "
        "content in the task when the approved one was not: those are asked about again.",
    )
    pattern: str | None = Field(
        default=None,
        description="With scope 'pattern': the calls this decision covers (for a command, "
        "each of its sub-commands must match).",
    )
    pattern_scope: Literal["session", "all_sessions"] = Field(
        default="session",
        description="With scope 'pattern': where the grant holds; the session it was given "
        "in unless the human chose every session.",
    )
    expires_at: datetime | None = None
    reason: str = ""
    decided_by: str | None = None
