"""Port for sending finished spans to a collector outside the kernel (OpenTelemetry...).

The trace store keeps every span on this machine; an exporter sends copies elsewhere, only
when the user configured one. The kernel never calls an exporter from a task: it queues each
span the trace store has written and a thread of its own hands them over in batches
(``core_agent.observability.span_export``), so a slow or failing collector never slows or
fails a task.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from core_agent.contracts.trace_store import Span


class ISpanExporter(abc.ABC):
    """Sends batches of finished spans to one collector.

    Span and trace ids are sent as they are (64-bit span ids and 128-bit trace ids in hex, as
    OpenTelemetry spells them), so a trace in the collector is the one ``core-agent trace``
    shows. Vendor errors never cross the port: they are ``SpanExportError``.
    """

    @property
    @abc.abstractmethod
    def destination(self) -> str:
        """Where the spans go (a URL), for messages; never holds a secret."""

    @abc.abstractmethod
    def export(self, spans: Sequence[Span]) -> int:
        """Send ``spans`` and wait until the collector took them; returns how many were sent.

        Blocks on the network (retrying what may pass) for at most the exporter's own time
        limit; the kernel calls it from a worker thread, one call at a time.

        Raises:
            SpanExportError: The collector refused the spans or could not be reached in
                time; some of them may have arrived.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Stop: an ``export`` under way gives up its retries soon; unusable afterwards.

        May be called from another thread than the one exporting, and more than once.
        """
