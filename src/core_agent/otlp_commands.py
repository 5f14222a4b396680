"""``core-agent export TASK --otlp [ENDPOINT]``: a past task's spans sent to a collector.

The spans are read from the trace store (as stored: redacted) and sent by the span exporter
the settings name (``otlp`` by default), to ``ENDPOINT`` or else ``AGENT_OTEL_ENDPOINT`` (or,
with ``AGENT_OTEL_USE_ENV=on``, the ``OTEL_EXPORTER_OTLP_*`` variables). Their ids are kept,
so sending a task twice gives the collector the same spans again, not a second trace.
"""

from __future__ import annotations

import argparse
import json

import anyio

from core_agent.command_errors import EXIT_OK
from core_agent.container import SPAN_EXPORTERS, create_kernel, load_provider
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings, http_url
from core_agent.contracts.span_exporter import ISpanExporter
from core_agent.safety.terminal_text import printable

NO_COLLECTOR = (
    "no collector to send to: give one (`--otlp http://localhost:4318`), or set AGENT_OTEL_ENDPOINT"
)


def otlp_settings(settings: AgentSettings, endpoint: str) -> AgentSettings:
    """``settings`` with ``endpoint`` (when given) as the collector.

    Raises:
        UsageError: ``endpoint`` is not an http(s) URL, or no collector is configured.
    """
    if endpoint:
        try:
            settings = settings.model_copy(update={"otel_endpoint": http_url(endpoint)})
        except ValueError as exc:
            raise UsageError(f"--otlp {endpoint!r} is not an http:// or https:// URL") from exc
    if not (settings.otel_endpoint or settings.otel_use_env):
        raise UsageError(NO_COLLECTOR)
    return settings


async def export_otlp(args: argparse.Namespace) -> int:
    """Send the task's spans; print how many went where.

    Raises:
        UsageError: No collector, a bad endpoint, or no such task.
        ConfigurationError: The exporter is not installed (the ``otel`` extra).
        SpanExportError: The collector did not take the spans.
    """
    settings = otlp_settings(AgentSettings(), args.otlp)
    exporter: ISpanExporter = load_provider(
        SPAN_EXPORTERS,
        settings.span_exporter_name or "otlp",
        settings,
        ISpanExporter,  # type: ignore[type-abstract]
    )
    try:
        # The kernel only reads here: it exports nothing itself.
        kernel = create_kernel(
            settings.model_copy(
                update={
                    "recovery": "off",
                    "span_exporter": None,
                    "otel_endpoint": None,
                    "otel_use_env": False,
                }
            )
        )
        async with kernel:
            task = await kernel.get_task(await kernel.find_task_id(args.task_id))
            spans = await kernel.task_spans(task.task_id)
        sent = await anyio.to_thread.run_sync(exporter.export, spans) if spans else 0
    finally:
        await anyio.to_thread.run_sync(exporter.close)
    if args.json:
        outcome = {
            "task_id": task.task_id,
            "trace_id": task.trace_id,
            "spans": sent,
            "destination": exporter.destination,
        }
        print(json.dumps(outcome, indent=2))
    elif sent:
        print(
            f"sent {sent} span(s) of task {task.task_id} (trace {task.trace_id}) to "
            f"{printable(exporter.destination, newlines=False)}"
        )
    else:
        print(f"task {task.task_id} has no spans: nothing was sent")
    return EXIT_OK
