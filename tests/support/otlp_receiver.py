"""A real OTLP/HTTP trace receiver on loopback, decoding requests with ``opentelemetry-proto``.

It does what a collector (an OpenTelemetry Collector, Jaeger, Arize Phoenix) does with
``POST /v1/traces``: takes an ``ExportTraceServiceRequest`` in protobuf (gzip or deflate
encoded or not), answers an ``ExportTraceServiceResponse``, and keeps the spans, which tests
read back with their resource, scope and attributes decoded.

Arize Phoenix (``arize-phoenix`` from PyPI, which users run locally) was measured for this
role and not used: installing it took 56 s into a fresh virtualenv (~150 packages, 855 MB),
into ours it would move ``openai`` to 3.x, which litellm refuses (``openai<3``), and pin
``tenacity`` below 9.2 (through google-genai); it took 10.6 s to answer its health check. A
receiver built on the protocol's own package tests the same bytes in milliseconds.

Faults: ``status`` makes it refuse requests with that HTTP status; ``hold()`` makes requests
wait until ``release()`` (a collector slower than the tasks).
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status

WAIT_S = 30.0
"""How long a test waits for spans before it fails (a safety net, not a performance limit)."""


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    """``SPAN_KIND_INTERNAL``, ``SPAN_KIND_CLIENT``..."""
    start_ns: int
    end_ns: int
    status: str
    """``STATUS_CODE_UNSET``, ``STATUS_CODE_OK`` or ``STATUS_CODE_ERROR``."""
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as the Python value it holds (arrays as lists)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, which)


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP key-values as a dict."""
    return {pair.key: any_value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as receiver:``; send spans to ``receiver.endpoint``."""

    def __init__(self) -> None:
        self.status = 200
        """The HTTP status requests get; another than 200 refuses their spans."""
        self.requests = 0
        """Requests that reached the receiver (refused ones too)."""
        self.content_types: list[str] = []
        self._spans: list[ReceivedSpan] = []
        self._changed = threading.Condition()
        self._open = threading.Event()
        self._open.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver._arrived(self)
                receiver._open.wait()
                receiver._received(self, body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL a collector is configured by (``/v1/traces`` is added to it)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._open.set()
        self._server.shutdown()
        self._server.server_close()

    def clear(self) -> None:
        """Forget what was received, and accept requests again."""
        with self._changed:
            self._spans.clear()
            self.requests = 0
            self.content_types.clear()
        self.status = 200
        self._open.set()

    def hold(self) -> None:
        """Make requests wait (unanswered) until ``release``."""
        self._open.clear()

    def release(self) -> None:
        """Answer the requests that wait, and the next ones at once."""
        self._open.set()

    @property
    def spans(self) -> list[ReceivedSpan]:
        """The spans received so far, in the order they arrived."""
        with self._changed:
            return list(self._spans)

    def wait_for_spans(self, count: int) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans arrived; returns them."""
        with self._changed:
            arrived = self._changed.wait_for(lambda: len(self._spans) >= count, timeout=WAIT_S)
            assert arrived, f"{len(self._spans)} span(s) arrived, not {count}"
            return list(self._spans)

    def wait_for_requests(self, count: int) -> None:
        """Wait until at least ``count`` requests reached the receiver."""
        with self._changed:
            arrived = self._changed.wait_for(lambda: self.requests >= count, timeout=WAIT_S)
            assert arrived, f"{self.requests} request(s) arrived, not {count}"

    def _arrived(self, handler: BaseHTTPRequestHandler) -> None:
        with self._changed:
            self.requests += 1
            self.content_types.append(handler.headers.get("Content-Type", ""))
            self._changed.notify_all()

    def _received(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        content_type = handler.headers.get("Content-Type", "")
        if self.status != 200:
            self._answer(handler, self.status, b"refused by the test")
            return
        if handler.path != "/v1/traces" or content_type != "application/x-protobuf":
            self._answer(handler, 415 if handler.path == "/v1/traces" else 404, b"")
            return
        encoding = handler.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        decoded = [
            _decoded(span, attributes(resource_spans.resource.attributes), scope_spans.scope.name)
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self._changed:
            self._spans.extend(decoded)
            self._changed.notify_all()
        self._answer(
            handler, 200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"
        )

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        content_type: str = "text/plain",
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


def _decoded(span: ProtoSpan, resource: dict[str, Any], scope: str) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex() or None,
        name=span.name,
        kind=ProtoSpan.SpanKind.Name(span.kind),
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        status=Status.StatusCode.Name(span.status.code),
        status_message=span.status.message,
        attributes=attributes(span.attributes),
        resource=resource,
        scope=scope,
    )
