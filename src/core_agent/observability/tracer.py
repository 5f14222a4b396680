"""Timing steps into spans and writing them to the trace store.

Every span of a task belongs to one tree. Its root is the ``task`` span, whose id follows
from the task's trace id (``root_span_id``), so whatever works on the task (a run resumed in
another process, a human's decision) hangs its spans under the root without looking it up.
The root is written when the task ends (``Tracer.end_task``); until then, and after a crash,
the spans written so far are readable and point at it.

The span being timed is the current one (``current_span``) for the code that runs inside it,
as in OpenTelemetry: a wrapper around a port (``traced_retrieval``) hangs its own span under
it without being handed a tracer.

What is written follows the store's ``recording``: nothing when tracing is off, and the
steps' content (messages, answers, arguments, results) only when content recording is on.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from core_agent.contracts.errors import ApprovalPendingError
from core_agent.contracts.trace_store import ITraceStore, Span, SpanKind
from core_agent.observability.log_context import span_log_context
from shared.agent_protocol import TokenUsage

REDACTION_MARGIN = 16_384
"""Content is cut here, this far past the store's cap, before it is written: the store
redacts secrets and only then cuts to its cap, so a cut never leaves part of a secret; the
margin is longer than any secret the redaction knows, and bounds its work on huge texts."""


def new_span_id() -> str:
    """A 64-bit random id in hex, as OpenTelemetry spells span ids.

    Unique, not secret: drawn from ``random`` (as OpenTelemetry's SDK does), without the
    system call ``secrets`` makes for every id.
    """
    return f"{random.getrandbits(64):016x}"


def new_trace_id() -> str:
    """A 128-bit random id in hex, as OpenTelemetry spells trace ids."""
    return secrets.token_hex(16)


def root_span_id(trace_id: str) -> str:
    """The id of the ``task`` span at the root of ``trace_id``'s tree (64 bits, in hex)."""
    return hashlib.blake2b(trace_id.encode(), digest_size=8).hexdigest()


class TaskReference(Protocol):
    """What names a task's trace: a ``TaskState`` or an executor's ``TaskIdentity``."""

    @property
    def task_id(self) -> str:
        """The task's id."""

    @property
    def trace_id(self) -> str:
        """The task's trace id."""

    @property
    def session_id(self) -> str:
        """The task's session id."""


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


_current: ContextVar[tuple[Tracer, str] | None] = ContextVar(
    "core_agent_current_span", default=None
)


def current_span() -> tuple[Tracer, str] | None:
    """The tracer and id of the span being timed around the caller, if any."""
    return _current.get()


def usage_attributes(usage: TokenUsage) -> dict[str, int]:
    """The cache-read and reasoning token counts of ``usage`` that its provider reported."""
    found: dict[str, int] = {}
    if usage.cache_read_tokens is not None:
        found["cache_read_tokens"] = usage.cache_read_tokens
    if usage.reasoning_tokens is not None:
        found["reasoning_tokens"] = usage.reasoning_tokens
    return found


class _Timed:
    """The block a span times (``Tracer.span``).

    A class rather than a generator-based context manager: it runs at every step, and costs
    less this way.
    """

    __slots__ = ("_log", "_span", "_suspends_on", "_token", "_tracer")

    def __init__(
        self, tracer: Tracer, span: OpenSpan, suspends_on: tuple[type[BaseException], ...]
    ) -> None:
        self._tracer = tracer
        self._span = span
        self._suspends_on = suspends_on
        self._token: Token[tuple[Tracer, str] | None] | None = None
        # Log records made in the step carry the span's ids.
        self._log = span_log_context(tracer.task_id, tracer.trace_id, span.span_id)

    async def __aenter__(self) -> OpenSpan:
        self._token = _current.set((self._tracer, self._span.span_id))
        self._log.__enter__()
        return self._span

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: object
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
        self._log.__exit__(None, None, None)
        span = self._span
        if exc is None:
            await self._tracer._write(span)
            return
        if isinstance(exc, self._suspends_on):
            span.attributes["suspended"] = str(exc)
        else:
            span.error = span.error or f"{type(exc).__name__}: {exc}"
        # Shielded: a step interrupted by cancellation still leaves its span behind.
        with anyio.CancelScope(shield=True):
            await self._tracer._write(span)


class Tracer:
    """Writes the spans of one task, each when its step ends (see the module).

    Attributes:
        content: Whether the steps' content is to be recorded; callers build it only then.
        root_span_id: The id of the task's root span, the parent of spans given none.
    """

    def __init__(
        self,
        store: ITraceStore,
        *,
        trace_id: str,
        task_id: str,
        session_id: str | None = None,
    ) -> None:
        self._store = store
        self.trace_id = trace_id
        self.task_id = task_id
        self.session_id = session_id
        recording = store.recording
        self._writes = recording.spans
        self.content = recording.spans and recording.content
        self._content_bound = recording.content_max_chars + REDACTION_MARGIN
        self.root_span_id = root_span_id(trace_id)

    @classmethod
    def of(cls, store: ITraceStore, task: TaskReference) -> Tracer:
        """The tracer of ``task`` (a ``TaskState`` or ``TaskIdentity``)."""
        return cls(store, trace_id=task.trace_id, task_id=task.task_id, session_id=task.session_id)

    def text(self, value: str) -> str:
        """``value`` as content to record: very long text is cut (see ``REDACTION_MARGIN``)."""
        return value if len(value) <= self._content_bound else value[: self._content_bound]

    def span(
        self,
        kind: SpanKind,
        name: str,
        *,
        parent_span_id: str | None = None,
        suspends_on: tuple[type[BaseException], ...] = (ApprovalPendingError,),
    ) -> AbstractAsyncContextManager[OpenSpan]:
        """Time the enclosed step; the span is written with status ``error`` if it raises.

        Without ``parent_span_id`` the span hangs under the task's root. An exception in
        ``suspends_on`` (a wait for a human, by default) is not a failure: the span is
        written ``ok`` with a ``suspended`` attribute. ``open_span.error`` may also be set by
        the step to mark a handled failure (a tool error given back to the model, say).
        """
        open_span = OpenSpan(
            span_id=new_span_id(),
            kind=kind,
            name=name,
            parent_span_id=parent_span_id or self.root_span_id,
            started_at=datetime.now(UTC),
        )
        return _Timed(self, open_span, suspends_on)

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

        Without ``parent_span_id`` it hangs under the task's root. With ``error`` the span's
        status is ``error``.
        """
        if not self._writes:
            return
        await self._store.record(
            Span(
                span_id=new_span_id(),
                trace_id=self.trace_id,
                task_id=self.task_id,
                kind=kind,
                name=name,
                started_at=started_at,
                ended_at=ended_at,
                parent_span_id=parent_span_id or self.root_span_id,
                status="error" if error else "ok",
                error=error,
                attributes=self._with_session(attributes or {}),
            )
        )

    async def end_task(
        self,
        *,
        started_at: datetime,
        status: str,
        usage: TokenUsage,
        strategy: str | None = None,
        error: str | None = None,
        failed: bool = False,
    ) -> None:
        """Write the task's root span, from ``started_at`` (its creation) to now.

        ``status`` is the task's final status. With ``failed`` the span's status is
        ``error``, with ``error``; otherwise ``error`` (a cancel's reason) is its ``reason``,
        recorded with content only: it is the host's or a user's words.
        """
        if not self._writes:
            return
        attributes: dict[str, Any] = {"task_status": status, **usage_attributes(usage)}
        if strategy is not None:
            attributes["strategy"] = strategy
        if error is not None and not failed:
            if self.content:
                attributes["reason"] = error
            error = None
        await self._store.record(
            Span(
                span_id=self.root_span_id,
                trace_id=self.trace_id,
                task_id=self.task_id,
                kind="task",
                name="task",
                started_at=started_at,
                ended_at=datetime.now(UTC),
                status="error" if failed else "ok",
                tokens_in=usage.input_tokens,
                tokens_out=usage.output_tokens,
                cost_usd=usage.cost_usd,
                error=error,
                attributes=self._with_session(attributes),
            )
        )

    def _with_session(self, attributes: dict[str, Any]) -> dict[str, Any]:
        if self.session_id is not None:
            attributes["session_id"] = self.session_id
        return attributes

    async def _write(self, open_span: OpenSpan) -> None:
        if not self._writes:
            return
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
                attributes=self._with_session(open_span.attributes),
            )
        )
