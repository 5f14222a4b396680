"""``ISpanExporter`` over OTLP/HTTP (protobuf), with OpenTelemetry's SDK exporter.

Spans go to the collector ``AGENT_OTEL_ENDPOINT`` names (a base URL gets ``/v1/traces``), or,
only with ``AGENT_OTEL_USE_ENV=on``, to the one the standard ``OTEL_EXPORTER_OTLP_*``
variables name; nothing is sent otherwise. Headers, certificates, compression and the time
limit of a request (10 s with its retries) are the SDK's own ``OTEL_EXPORTER_OTLP_*``
variables, as for any OpenTelemetry program; ``service.name`` is ``core-agent`` unless
``OTEL_SERVICE_NAME`` says otherwise.

The SDK is imported on the first export, in the exporting thread, so a kernel starts as fast
with export on; a missing ``otel`` extra is found when the exporter is built. The SDK logs why
an export failed; those lines (made in the thread exporting) are caught here and become the
``SpanExportError``'s message, so a failing collector is told once, by the kernel, not once
per batch by the SDK.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from core_agent.contracts.errors import ConfigurationError, ExtraNotInstalledError, SpanExportError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.span_exporter import ISpanExporter
from core_agent.contracts.trace_store import Span

if TYPE_CHECKING:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

TRACES_PATH = "/v1/traces"
DEFAULT_ENDPOINT = "http://localhost:4318"
"""OpenTelemetry's default collector: with ``AGENT_OTEL_USE_ENV``, when no variable names one."""
SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
)
"""Where the SDK's exporter logs its failures (and retries)."""
_REQUIRED = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


def traces_url(endpoint: str) -> str:
    """The collector's traces URL: ``endpoint`` as it is if it has a path, else ``/v1/traces``."""
    parts = urlsplit(endpoint.strip())
    if parts.path.strip("/"):
        return urlunsplit(parts)
    return urlunsplit(parts._replace(path=TRACES_PATH))


def shown_url(url: str) -> str:
    """``url`` without a user name or password, for messages."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def env_traces_url() -> str:
    """The traces URL the SDK takes from the ``OTEL_EXPORTER_OTLP_*`` variables."""
    explicit = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if explicit:
        return explicit
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    return base.rstrip("/") + TRACES_PATH


class _Failures(logging.Filter):
    """Takes the SDK's log lines made in the exporting thread, keeping the last error's text."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def begin(self) -> None:
        self._local.capturing, self._local.error, self._local.retry = True, None, None

    def end(self) -> str | None:
        """Why the export failed: the SDK's last error, with the first retry's cause."""
        self._local.capturing = False
        error: str | None = self._local.error
        retry: str | None = self._local.retry
        if error and retry:
            return f"{error} ({retry})"
        return error or retry

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(self._local, "capturing", False):
            return True  # another thread's OpenTelemetry (the host's own) logs as usual
        if record.levelno >= logging.ERROR:
            self._local.error = record.getMessage()
        elif record.levelno >= logging.WARNING and self._local.retry is None:
            self._local.retry = record.getMessage()  # the first: the cause, not the giving up
        return False


_FAILURES = _Failures()


class OpenTelemetrySpanExporter(ISpanExporter):
    """Sends spans to an OTLP/HTTP collector, with GenAI semantic-convention attributes."""

    def __init__(self, endpoint: str | None) -> None:
        """``endpoint`` is the collector's URL; ``None`` leaves it to ``OTEL_EXPORTER_OTLP_*``.

        Raises:
            ExtraNotInstalledError: The ``otel`` extra is not installed.
        """
        missing = [name for name in _REQUIRED if not _installed(name)]
        if missing:
            raise ExtraNotInstalledError("exporting spans to an OpenTelemetry collector", "otel")
        self._endpoint = traces_url(endpoint) if endpoint else None
        self._url = self._endpoint or env_traces_url()
        self._lock = threading.Lock()
        self._sdk: OTLPSpanExporter | None = None
        self._closed = False
        self._resource: Any = None
        self._scope: Any = None

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> OpenTelemetrySpanExporter:
        """The collector of ``AGENT_OTEL_ENDPOINT``, or of the OTEL_* variables if allowed.

        Raises:
            ConfigurationError: Neither is configured.
            ExtraNotInstalledError: The ``otel`` extra is not installed.
        """
        if settings.otel_endpoint:
            return cls(settings.otel_endpoint)
        if settings.otel_use_env:
            return cls(None)
        raise ConfigurationError(
            "the otlp span exporter needs a collector: set AGENT_OTEL_ENDPOINT (e.g. "
            "http://localhost:4318), or AGENT_OTEL_USE_ENV=on to use OTEL_EXPORTER_OTLP_ENDPOINT"
        )

    @property
    def destination(self) -> str:
        """See ``ISpanExporter.destination``."""
        return shown_url(self._url)

    def export(self, spans: Sequence[Span]) -> int:
        """See ``ISpanExporter.export``."""
        if not spans:
            return 0
        sdk = self._exporter()
        from opentelemetry.sdk.trace.export import SpanExportResult

        from providers.otel.genai_spans import readable_span

        batch = [readable_span(span, self._resource, self._scope) for span in spans]
        _FAILURES.begin()
        try:
            result = sdk.export(batch)
        except Exception as exc:  # the SDK's own bug or a transport's: never past the port
            raise SpanExportError(f"exporting to {self.destination} failed: {exc}") from exc
        finally:
            reason = _FAILURES.end()
        if result is not SpanExportResult.SUCCESS:
            raise SpanExportError(
                f"the collector at {self.destination} did not take {len(spans)} span(s): "
                f"{reason or 'the exporter was closed'}"
            )
        return len(spans)

    def close(self) -> None:
        """See ``ISpanExporter.close``."""
        with self._lock:
            self._closed = True
            sdk, self._sdk = self._sdk, None
        if sdk is not None:
            sdk.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated

    def _exporter(self) -> OTLPSpanExporter:
        with self._lock:
            if self._closed:
                raise SpanExportError(f"the exporter to {self.destination} is closed")
            if self._sdk is None:
                self._sdk = self._build()
            return self._sdk

    def _build(self) -> OTLPSpanExporter:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        version = _version()
        # create(): OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES still apply.
        self._resource = Resource.create({"service.name": "core-agent", "service.version": version})
        self._scope = InstrumentationScope("core_agent", version)
        for name in SDK_LOGGERS:
            logger = logging.getLogger(name)
            if _FAILURES not in logger.filters:
                logger.addFilter(_FAILURES)
        return OTLPSpanExporter(endpoint=self._url)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _version() -> str:
    try:
        return metadata.version("core-agent")
    except metadata.PackageNotFoundError:
        return "unknown"
