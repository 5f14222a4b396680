"""A span exporter that records the batches it is given, and can fail or hang like a collector."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from core_agent.contracts.errors import SpanExportError
from core_agent.contracts.span_exporter import ISpanExporter
from core_agent.contracts.trace_store import Span


class FakeSpanExporter(ISpanExporter):
    """Keeps every batch; ``fail`` makes exports raise, ``block()`` makes them wait."""

    def __init__(self) -> None:
        self.batches: list[list[Span]] = []
        self.fail = False
        self.closed = False
        self.calls = 0
        self.entered = threading.Event()
        """Set once an export has started."""
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    @property
    def destination(self) -> str:
        return "fake://collector"

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return [span for batch in self.batches for span in batch]

    def block(self) -> None:
        """Make exports wait (as on a collector that does not answer) until ``unblock``."""
        self._open.clear()

    def unblock(self) -> None:
        self._open.set()

    def wait_for_spans(self, count: int, timeout_s: float = 30.0) -> list[Span]:
        with self._changed:
            self._changed.wait_for(
                lambda: sum(len(batch) for batch in self.batches) >= count, timeout=timeout_s
            )
        return self.spans

    def export(self, spans: Sequence[Span]) -> int:
        with self._lock:
            self.calls += 1
        self.entered.set()
        self._open.wait()
        if self.fail:
            raise SpanExportError("the collector answered 503")
        with self._changed:
            self.batches.append(list(spans))
            self._changed.notify_all()
        return len(spans)

    def close(self) -> None:
        self.closed = True
        self._open.set()
