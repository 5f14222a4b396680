"""Timing steps into spans and writing them to the trace store."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio

from core_agent.contracts.errors import ApprovalPendingError
from core_agent.contracts.trace_store import ITraceStore, Span, SpanKind
from core_agent.observability.log_context import span_log_context


def new_span_id() -> str:
    """A 64-bit random id in hex, as OpenTelemetry spells span ids."""
    return secrets.token_hex(8)


def new_trace_id() -> str:
    """A 128-bit random id in hex, as OpenTelemetry spells trace ids."""
    return secrets.token_hex(16)


@dataclass(slots=True)
class OpenSpan:
    """A span being timed; the step fills in tokens, cost and attributes as it learns them."""

    span_id: str
    kind: SpanKind
    name: str
    parent_span_id: str | None
    started_at: datetime
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class Tracer:
    """Writes one span per step of one task, each when the step ends."""

    def __init__(self, store: ITraceStore, *, trace_id: str, task_id: str) -> None:
        self._store = store
        self.trace_id = trace_id
        self.task_id = task_id

    @asynccontextmanager
    async def span(
        self,
        kind: SpanKind,
        name: str,
        *,
        parent_span_id: str | None = None,
        suspends_on: tuple[type[BaseException], ...] = (ApprovalPendingError,),
    ) -> AsyncIterator[OpenSpan]:
        """Time the enclosed step; the span is written with status ``error`` if it raises.

        Log records made in the step carry the span's ids (``log_context``).

        An exception in ``suspends_on`` (a wait for a human, by default) is not a failure: the
        span is written ``ok`` with a ``suspended`` attribute. ``open_span.error`` may also be
        set by the step to mark a handled failure (a tool error given back to the model, say).
        """
        open_span = OpenSpan(
            span_id=new_span_id(),
            kind=kind,
            name=name,
            parent_span_id=parent_span_id,
            started_at=datetime.now(UTC),
        )
        try:
            with span_log_context(self.task_id, self.trace_id, open_span.span_id):
                yield open_span
        except suspends_on as exc:
            open_span.attributes["suspended"] = str(exc)
            with anyio.CancelScope(shield=True):
                await self._write(open_span)
            raise
        except BaseException as exc:
            open_span.error = open_span.error or f"{type(exc).__name__}: {exc}"
            # Shielded: a step interrupted by cancellation still leaves its span behind.
            with anyio.CancelScope(shield=True):
                await self._write(open_span)
            raise
        await self._write(open_span)

    async def record(
        self,
        kind: SpanKind,
        name: str,
        *,
        started_at: datetime,
        ended_at: datetime,
        parent_span_id: str | None = None,
        attributes: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Write a span for a step that was timed elsewhere (before the task existed, say).

        With ``error`` the span's status is ``error``.
        """
        await self._store.record(
            Span(
                span_id=new_span_id(),
                trace_id=self.trace_id,
                task_id=self.task_id,
                kind=kind,
                name=name,
                started_at=started_at,
                ended_at=ended_at,
                parent_span_id=parent_span_id,
                status="error" if error else "ok",
                error=error,
                attributes=attributes or {},
            )
        )

    async def _write(self, open_span: OpenSpan) -> None:
        await self._store.record(
            Span(
                span_id=open_span.span_id,
                trace_id=self.trace_id,
                task_id=self.task_id,
                kind=open_span.kind,
                name=open_span.name,
                started_at=open_span.started_at,
                ended_at=datetime.now(UTC),
                status="error" if open_span.error else "ok",
                parent_span_id=open_span.parent_span_id,
                tokens_in=open_span.tokens_in,
                tokens_out=open_span.tokens_out,
                cost_usd=open_span.cost_usd,
                error=open_span.error,
                attributes=open_span.attributes,
            )
        )
