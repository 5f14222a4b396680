"""Port for spans: the timed, costed record of every step of a task."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from core_agent.contracts.metrics import MetricsScope, SpanMetrics

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
    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        """Tokens, cost, latencies, models and tools of the spans of the tasks in ``scope``.

        The tasks are those of the task store this store keeps spans for (a store in the
        same database reads its tasks table), selected as ``MetricsScope`` says. Counted:

        - ``tokens``: the sum over every span but ``task`` (a task's root span repeats the
          sum of its model calls) and ``llm_attempt`` (its ``llm`` span carries the usage).
        - ``latency_by_kind``: the latency percentiles of the spans of each kind.
        - ``models``: ``llm`` spans by the model that answered (the ``fallback_model``
          attribute, else the span's name): calls, errors, tokens, cost, latency.
        - ``tools``: ``tool`` spans by name, leaving out those written when the call was
          suspended for a human (``suspended`` attribute; the call writes another span when
          it is resumed); ``refused`` when the ``error_type`` attribute is in
          ``REFUSED_ERROR_TYPES``, else ``errors`` when the span's status is ``error``.

        Percentiles are nearest-rank (see ``core_agent.contracts.metrics``). A store should
        compute this where the spans are (SQL aggregates over indexes), not by reading every
        span into the process; it may take a while on a large store, and must not block the
        event loop meanwhile.

        Raises:
            StorageError: The spans cannot be read.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
