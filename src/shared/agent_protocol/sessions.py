"""Sessions: conversations that tasks continue, with their history and summaries."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.agent_protocol.messages import ChatMessage
from shared.agent_protocol.tasks import TokenUsage


class SessionOrigin(BaseModel):
    """Where a forked session came from: the session, and the turn it was forked at."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    turn: int = Field(ge=1, description="The origin's turn the fork ends with (its number there).")


class SessionInfo(BaseModel):
    """A session as stored: who it belongs to, what the host attached to it, whether it is open.

    A session is created by ``create_session``, by ``fork_session`` (a copy of another's
    history up to a turn) or, implicitly, by the first task that names it. A closed session
    keeps its history (to show) but accepts no more tasks.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session"] = "session"
    session_id: str
    user_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = None
    task_count: int = Field(default=0, ge=0, description="Tasks run in the session so far.")
    forked_from: SessionOrigin | None = Field(
        default=None, description="The session and turn this one was forked from, if it was."
    )
    inherited_usage: TokenUsage = Field(
        default_factory=TokenUsage,
        description="A fork's share of its origin's usage: what the origin had used when the "
        "turn it was forked at ended (its own inherited usage included), and what its tasks "
        "that added no turn used. It counts against "
        "the session's usage limits, so a fork does not start a fresh budget.",
    )


class SessionEntry(BaseModel):
    """One message of a session's history, in the order the conversation had them.

    A finished task adds its turn: the user's message, the tool calls it made with their
    (shortened) results, and its answer (or why it has none). Turns are numbered from 1 in
    the order they were added, and keep their number: a turn superseded by a retry keeps it,
    and the retried turn gets the next one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session_entry"] = "session_entry"
    session_id: str
    seq: int = Field(ge=1, description="Position in the session's history, from 1.")
    turn: int = Field(ge=1, description="The turn (one task's part) it belongs to, from 1.")
    task_id: str
    message: ChatMessage
    tainted: bool = Field(
        default=False, description="The task that wrote it held untrusted content."
    )
    superseded_by: str | None = Field(
        default=None,
        description="The task that retried this turn or an earlier one: the entry stays in "
        "the transcript, but no later task's prompt holds it.",
    )
    created_at: datetime


class SessionSummary(BaseModel):
    """The model's summary of a session's history up to ``through_seq``.

    It stands for every entry up to and including ``through_seq`` in the prompts of later
    tasks; each new summary folds the previous one in, so the latest is the only one used.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session_summary"] = "session_summary"
    session_id: str
    through_seq: int = Field(ge=1)
    content: str
    task_id: str = Field(
        description="The task whose start made the summary (for a summary a host asked for, "
        "the newest task it covers)."
    )
    tainted: bool = False
    usage: TokenUsage = Field(default_factory=TokenUsage)
    superseded_by: str | None = Field(
        default=None,
        description="The task that retried a turn this summary covers: no later task uses it.",
    )
    created_at: datetime


class SessionTranscript(BaseModel):
    """A session with its whole history and the summaries made of it, for a host to show."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session_transcript"] = "session_transcript"
    session: SessionInfo
    entries: list[SessionEntry] = Field(default_factory=list)
    summaries: list[SessionSummary] = Field(default_factory=list)
