"""``core-agent stats``: tasks, tokens, cost, latencies, tools and approvals over many tasks.

Kept apart from ``cli`` so the command parser stays small; imported only when ``stats`` runs.
The numbers are the stores' (``AgentKernel.metrics``); this module prints them, as a few
tables or as the JSON of ``AgentMetrics``.
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime

from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from core_agent.contracts.errors import UsageError
from core_agent.contracts.metrics import AgentMetrics, LatencyPercentiles
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.observability.metrics import moment_since
from core_agent.safety.terminal_text import printable

EXIT_OK = 0
NONE = "–"


def since_argument(text: str) -> datetime:
    """``--since``'s value (argparse's ``type``): local time where the text names no zone.

    Raises:
        argparse.ArgumentTypeError: Not a duration or an ISO date or time.
    """
    try:
        return moment_since(text, now=datetime.now().astimezone())
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def stats(args: argparse.Namespace, kernel: AgentKernel) -> int:
    """Print the metrics of the tasks ``args`` selects (``since``, ``session``, ``json``)."""
    async with kernel:
        metrics = await kernel.metrics(since=args.since, session_id=args.session)
    if args.json:
        report = _finite(metrics.model_dump(mode="json"))
        print(json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False))
        return EXIT_OK
    print_metrics(Console(highlight=False), metrics)
    return EXIT_OK


def _finite(value: object) -> object:
    """``value`` with every number JSON has no word for as ``null`` (unknown).

    Only damaged rows make one (an infinite or NaN sum); the output stays JSON any reader
    takes.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def print_metrics(console: Console, metrics: AgentMetrics) -> None:
    """The metrics as a heading line and a table per part (parts with nothing are left out)."""
    scope = metrics.scope
    where = [f"since {scope.since.isoformat(timespec='seconds')}"] if scope.since else []
    if scope.session_id is not None:
        where.append(f"session {printable(scope.session_id, newlines=False)}")
    tasks = metrics.tasks
    console.print(
        Text(f"{tasks.total} tasks" + (f" ({', '.join(where)})" if where else " (all)")),
    )
    if tasks.unknown_status:
        unknown = ", ".join(
            f"{printable(status, newlines=False)!r}: {count:,}"
            for status, count in tasks.unknown_status.items()
        )
        console.print(
            Text(
                f"Not counted: tasks with a status this core-agent does not know ({unknown}); "
                "a newer core-agent may have written them",
                style="yellow",
            )
        )
    if not tasks.total:
        return
    statuses = Table("status", *_numbers("tasks"), title="Tasks", title_justify="left")
    for status, count in tasks.by_status.items():
        if count:
            statuses.add_row(status.value, f"{count:,}")
    console.print(statuses)

    tokens = metrics.tokens
    console.print(
        Text(f"Tokens: {tokens.input:,} in, {tokens.output:,} out; cost {_cost(tokens.cost_usd)}")
    )
    if metrics.models:
        models = Table(
            Column("model", overflow="fold"),
            *_numbers("calls", "errors", "in", "out", "cost", "p50", "p95"),
            title="Models (tokens in and out)",
            title_justify="left",
        )
        for model in metrics.models:
            models.add_row(
                Text(printable(model.model, newlines=False)),
                f"{model.calls:,}",
                f"{model.errors:,}",
                f"{model.input_tokens:,}",
                f"{model.output_tokens:,}",
                _cost(model.cost_usd),
                *_percentiles(model.latency),
            )
        console.print(models)
    if metrics.latency_by_kind:
        kinds = Table(
            "span kind", *_numbers("spans", "p50", "p95"), title="Latency", title_justify="left"
        )
        for kind in metrics.latency_by_kind:
            kinds.add_row(Text(kind.kind), f"{kind.latency.count:,}", *_percentiles(kind.latency))
        console.print(kinds)
    if metrics.tools:
        tools = Table(
            Column("tool", overflow="fold"),
            *_numbers("calls", "errors", "refused", "success", "p50", "p95"),
            title="Tools",
            title_justify="left",
            caption="success: of the calls that ran (refused ones never did)",
            caption_justify="left",
        )
        for tool in metrics.tools:
            tools.add_row(
                Text(printable(tool.tool, newlines=False)),
                f"{tool.calls:,}",
                f"{tool.errors:,}",
                f"{tool.refused:,}",
                _rate(tool.success_rate),
                *_percentiles(tool.latency),
            )
        console.print(tools)
    approvals = metrics.approvals
    if approvals.requested:
        table = Table(
            "approvals",
            *_numbers("requests", "share"),
            title="Approvals",
            title_justify="left",
        )
        for outcome, count in (
            ("approved", approvals.approved),
            ("denied", approvals.denied),
            ("expired", approvals.expired),
            ("pending", approvals.pending),
        ):
            table.add_row(
                outcome,
                f"{count:,}",
                _rate(count / approvals.requested),
                end_section=outcome == "pending",
            )
        table.add_row("requested", f"{approvals.requested:,}", "")
        console.print(table)
        p50, p95 = _percentiles(approvals.wait)
        console.print(
            Text(f"Wait for a decision: p50 {p50}, p95 {p95} ({approvals.wait.count:,} decided)")
        )


def _numbers(*headers: str) -> list[Column]:
    return [Column(header, justify="right") for header in headers]


def _percentiles(latency: LatencyPercentiles) -> tuple[str, str]:
    return _duration(latency.p50_ms), _duration(latency.p95_ms)


def _duration(ms: float | None) -> str:
    if ms is None:
        return NONE
    if ms < 1000:
        return f"{ms:.1f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.2f} s"
    return f"{ms / 60_000:.1f} min"


def _rate(rate: float | None) -> str:
    return NONE if rate is None else f"{rate:.1%}"


def _cost(cost: float | None) -> str:
    return "unknown" if cost is None or not math.isfinite(cost) else f"${cost:.4f}"
