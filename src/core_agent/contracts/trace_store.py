"""Port for spans: the timed, costed record of every step of a task."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

SpanKind = Literal[
    "task",
    "planning",
    "step",
    "llm",
    "llm_attempt",
    "tool",
    "policy",
    "approval",
    "memory",
    "retrieval",
]
"""``llm_attempt``: one request of a model call (a child of its ``llm`` span); a call that
was retried or fell back to another model has several."""
SpanStatus = Literal["ok", "error"]


@dataclass(frozen=True, slots=True)
class Span:
    """One finished step. Spans are written whole, when the step ends, never half."""

    span_id: str
    trace_id: str
    task_id: str
    kind: SpanKind
    name: str
    started_at: datetime
    ended_at: datetime
    status: SpanStatus = "ok"
    parent_span_id: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    error: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def latency_ms(self) -> float:
        """Wall time of the step in milliseconds."""
        return (self.ended_at - self.started_at).total_seconds() * 1000.0


class ITraceStore(abc.ABC):
    """Persists spans for inspection and replay.

    Methods are awaitable and keep blocking I/O off the event loop. Failures raise
    ``StorageError``; a failed write leaves no partial span.
    """

    @abc.abstractmethod
    async def record(self, span: Span) -> None:
        """Persist one finished span.

        Raises:
            StorageError: Nothing was written.
        """

    @abc.abstractmethod
    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """Spans of a task or a trace, ordered by start time (then insertion).

        Raises:
            UsageError: Neither ``task_id`` nor ``trace_id`` was given.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
