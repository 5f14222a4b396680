"""What is kept of spans: all, none (tracing off), and no text longer than the cap.

The container puts ``RecordingTraceStore`` between the redacting wrapper and the configured
store, so it sees spans already redacted: it cuts their long texts after the secrets in them
were replaced, and a cut never leaves part of a secret behind.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core_agent.contracts.trace_store import ITraceStore, Span, TraceRecording

CUT_MARK = "… [{count} more characters not recorded]"


def cut_texts(value: Any, limit: int) -> Any:
    """JSON-like ``value`` with every string longer than ``limit`` cut to its head, marked."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + CUT_MARK.format(count=len(value) - limit)
    if isinstance(value, dict):
        return {key: cut_texts(item, limit) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [cut_texts(item, limit) for item in value]
    return value


class RecordingTraceStore(ITraceStore):
    """Keeps spans as ``recording`` says: none when tracing is off, texts cut to the cap.

    Reads pass through, so spans written before tracing was turned off stay readable.
    """

    def __init__(self, inner: ITraceStore, recording: TraceRecording) -> None:
        self._inner = inner
        self._recording = recording

    @property
    def recording(self) -> TraceRecording:
        """What the tracers write here (``AGENT_TRACING``, ``AGENT_TRACE_CONTENT*``)."""
        return self._recording

    async def record(self, span: Span) -> None:
        """See ``ITraceStore.record``; dropped when tracing is off."""
        if not self._recording.spans:
            return
        limit = self._recording.content_max_chars
        error = span.error
        await self._inner.record(
            dataclasses.replace(
                span,
                error=error if error is None or len(error) <= limit else cut_texts(error, limit),
                attributes=cut_texts(span.attributes, limit),
            )
        )

    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """See ``ITraceStore.list_spans``."""
        return await self._inner.list_spans(task_id=task_id, trace_id=trace_id)

    async def close(self) -> None:
        """See ``ITraceStore.close``."""
        await self._inner.close()
