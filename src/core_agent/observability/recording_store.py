"""Whether spans are kept, and what the tracers are told to put in them.

The container puts ``RecordingTraceStore`` under the redacting wrapper, around the configured
store: the tracers read its ``recording`` (through the wrapper) to know whether to time
spans and build their content at all, the redacting wrapper cuts texts to its cap once the
secrets in them are replaced, and with tracing off this store drops whatever still reaches it.
With content off, this store is where content is kept out, whatever the tracers did: a span's
error keeps only its kind (``error_kind``), since the text of a tool's error, a provider's or
an exception's quotes what the step held, and its attributes only those known to be free of
content (``without_content``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable

from core_agent.contracts.metrics import MetricsScope, SpanMetrics
from core_agent.contracts.trace_store import (
    CONTENT_FREE_ATTRIBUTES,
    COUNTED_ATTRIBUTES,
    ITraceStore,
    Span,
    TraceRecording,
)

_KIND = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")
NO_KIND = "error"
"""What an error without a kind of its own is recorded as when content is off."""


def error_kind(span: Span) -> str:
    """What of ``span``'s error is kept without content: its type, never its text.

    The ``error_type`` attribute a step gave it (a tool's), else the exception type an error
    text starts with (``ModelError: ...``), else ``NO_KIND``.
    """
    given = span.attributes.get("error_type")
    if isinstance(given, str) and _KIND.fullmatch(given):
        return given
    head, colon, _ = (span.error or "").partition(":")
    if colon and _KIND.fullmatch(head):
        return head
    return NO_KIND


def without_content(span: Span) -> Span:
    """``span`` as kept without content recording.

    Its error is its kind (``error_kind``); of its attributes, those in
    ``CONTENT_FREE_ATTRIBUTES`` stay, those in ``COUNTED_ATTRIBUTES`` only as a count, and
    ``error_type`` only when it is a name; the rest are dropped.
    """
    attributes = {
        name: value
        for name, value in span.attributes.items()
        if (name in CONTENT_FREE_ATTRIBUTES and name != "error_type")
        or (name in COUNTED_ATTRIBUTES and type(value) is int)
    }
    given = span.attributes.get("error_type")
    if isinstance(given, str) and _KIND.fullmatch(given):
        attributes["error_type"] = given
    error = None if span.error is None else error_kind(span)
    return dataclasses.replace(span, error=error, attributes=attributes)


class RecordingTraceStore(ITraceStore):
    """``inner``, with the ``recording`` the settings ask for; no span kept with tracing off.

    Reads pass through, so spans written before tracing was turned off stay readable.
    """

    def __init__(self, inner: ITraceStore, recording: TraceRecording) -> None:
        self._inner = inner
        self._recording = recording

    @property
    def recording(self) -> TraceRecording:
        """What the tracers write here (``AGENT_TRACING``, ``AGENT_TRACE_CONTENT*``)."""
        return self._recording

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """See ``ITraceStore.after_commit``."""
        return self._inner.after_commit(callback)

    async def record(self, span: Span) -> None:
        """See ``ITraceStore.record``: nothing with tracing off.

        With content off, the span is kept as ``without_content`` gives it.
        """
        if not self._recording.spans:
            return
        if not self._recording.content:
            span = without_content(span)
        await self._inner.record(span)

    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """See ``ITraceStore.list_spans``."""
        return await self._inner.list_spans(task_id=task_id, trace_id=trace_id)

    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        """See ``ITraceStore.span_metrics``."""
        return await self._inner.span_metrics(scope)

    async def close(self) -> None:
        """See ``ITraceStore.close``."""
        await self._inner.close()
