"""Sending each stored span to a span exporter too, without a task ever waiting for it.

``ExportingTraceStore`` wraps the trace store: a span is written to the store first (the
local trace is the record), then put on a bounded queue. One thread per queue gathers the
spans that arrive within a second of the first as one batch and hands it to the exporter;
while an export is under way new spans gather for the next batch. So a task never waits for
the network: when the collector is slower than the tasks and the queue is full, further spans
are dropped for it (and counted in a warning), and a collector that fails is reported once,
not once per batch. The spans stay in the local trace either way; ``core-agent export TASK
--otlp`` sends a task again.

A plain thread and ``queue.Queue`` rather than the event loop: exporters are blocking clients
(OpenTelemetry's is), and spans come from any loop or thread of the host.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio

from core_agent.contracts.metrics import MetricsScope, SpanMetrics
from core_agent.contracts.span_exporter import ISpanExporter
from core_agent.contracts.trace_store import ITraceStore, Span

log = logging.getLogger(__name__)

DEFAULT_MAX_SPANS = 2048
"""Spans held for the exporter before further ones are dropped."""
MAX_BATCH_SPANS = 512
"""Spans handed to one ``export`` call at most."""
BATCH_DELAY_S = 1.0
"""How long the first span of a batch waits for others. A request per step would cost the
tasks more than the spans: the exporting thread shares the interpreter with them."""
DEFAULT_CLOSE_TIMEOUT_S = 2.0
"""How long closing waits for the queued spans to be exported before giving up on them: a
command that ends waits this long at most for a collector that does not answer."""

_STOP = None


class SpanExportQueue:
    """Hands the spans it is given to ``exporter`` from a thread of its own, in batches."""

    def __init__(self, exporter: ISpanExporter, *, max_spans: int = DEFAULT_MAX_SPANS) -> None:
        self.exporter = exporter
        self._queue: queue.Queue[Span | None] = queue.Queue(max_spans)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        """No more spans are taken (closing, or no thread could start)."""
        self._shut = False
        self._dropped = 0
        self._failing = False
        self.exported = 0
        """Spans the exporter took so far."""
        self.failed = 0
        """Spans of batches the exporter could not send."""

    @property
    def dropped(self) -> int:
        """Spans dropped so far because the queue was full."""
        with self._lock:
            return self._dropped

    def submit(self, span: Span) -> None:
        """Queue ``span`` for export; returns at once and never raises.

        When the queue is full the span is dropped and counted (the first drop of a streak
        is logged as a warning); after ``close`` spans are ignored.
        """
        with self._lock:
            if self._closed or not self._started():
                return
            try:
                self._queue.put_nowait(span)
                return
            except queue.Full:
                self._dropped += 1
                first_drop = self._dropped == 1
        if first_drop:
            log.warning(
                "span export to %s is falling behind: spans are dropped for it (they stay in "
                "the local trace; AGENT_SPAN_EXPORT_QUEUE holds more)",
                self.exporter.destination,
            )

    def _started(self) -> bool:
        """Start the thread on the first span (a kernel that runs no task starts none)."""
        if self._thread is not None:
            return True
        thread = threading.Thread(target=self._run, name="core-agent span export", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # no thread can be started: spans are not exported
            self._closed = True
            log.warning("span export to %s is off: %s", self.exporter.destination, exc)
            return False
        self._thread = thread
        return True

    def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Export what is queued for up to ``timeout_s``, then stop and close the exporter.

        Blocks (call it off the event loop). Spans still queued then are given up, with a
        warning; the thread, a daemon, never holds the process up.
        """
        with self._lock:
            if self._shut:
                return
            self._shut = self._closed = True
            thread = self._thread
        failing = self._failing
        if failing:
            timeout_s = 0.0  # the collector fails (and was reported): waiting changes nothing
        deadline = time.monotonic() + timeout_s
        if thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put(_STOP, timeout=timeout_s)
            thread.join(max(0.0, deadline - time.monotonic()))
        # Also what makes an export still retrying give up.
        try:
            self.exporter.close()
        except Exception:
            log.warning("closing the span exporter failed", exc_info=True)
        if thread is not None and thread.is_alive() and not failing:
            log.warning(
                "span export to %s did not finish within %.0f s: the spans still queued were "
                "not sent (they stay in the local trace)",
                self.exporter.destination,
                timeout_s,
            )
        if self.dropped:
            log.warning(
                "%d span(s) were not sent to %s: the export queue was full",
                self.dropped,
                self.exporter.destination,
            )

    def _run(self) -> None:
        while True:
            batch, stop = self._take()
            if batch:
                self._send(batch)
            if stop:
                return

    def _take(self) -> tuple[list[Span], bool]:
        """Wait for a span, then for more during ``BATCH_DELAY_S``: a batch, and whether to stop.

        Closing (the stop mark) ends the wait at once.
        """
        first = self._queue.get()
        if first is _STOP:
            return [], True
        batch = [first]
        deadline = time.monotonic() + BATCH_DELAY_S
        while len(batch) < MAX_BATCH_SPANS:
            try:
                span = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if span is _STOP:
                return batch, True
            batch.append(span)
        return batch, False

    def _send(self, batch: Sequence[Span]) -> None:
        try:
            self.exporter.export(batch)
        except Exception as exc:  # an exporter's failure, whatever it is, is never a task's
            self.failed += len(batch)
            if not self._failing:
                self._failing = True
                log.warning(
                    "spans were not sent to %s: %s (they stay in the local trace; "
                    "`core-agent export TASK --otlp` sends a task again)",
                    self.exporter.destination,
                    exc,
                )
            else:
                log.debug("spans were not sent to %s: %s", self.exporter.destination, exc)
            return
        self.exported += len(batch)
        if self._failing:
            self._failing = False
            log.warning("span export to %s works again", self.exporter.destination)


class ExportingTraceStore(ITraceStore):
    """A trace store that also queues every span it wrote for a span exporter."""

    def __init__(
        self,
        inner: ITraceStore,
        exports: SpanExportQueue,
        *,
        close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
    ) -> None:
        self._inner = inner
        self.exports = exports
        self._close_timeout_s = close_timeout_s

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """See ``ITraceStore.after_commit``."""
        return self._inner.after_commit(callback)

    async def record(self, span: Span) -> None:
        """See ``ITraceStore.record``; the span is queued for export once it is stored.

        Stored means committed: a span written inside a unit of work is queued when the unit
        commits, and never when its write is left out or the unit fails.
        """
        await self._inner.record(span)

        async def stored() -> None:
            self.exports.submit(span)

        if not self._inner.after_commit(stored):
            self.exports.submit(span)

    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """See ``ITraceStore.list_spans``."""
        return await self._inner.list_spans(task_id=task_id, trace_id=trace_id)

    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        """See ``ITraceStore.span_metrics``."""
        return await self._inner.span_metrics(scope)

    async def close(self) -> None:
        """Close the store, then export what is queued (waiting ``close_timeout_s`` at most)."""
        try:
            await self._inner.close()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.exports.close, self._close_timeout_s)
