"""Metrics of many tasks at once: the two stores asked together, and ``--since`` read.

The counting itself is the stores' (``ITaskStore.task_metrics``, ``ITraceStore.span_metrics``),
where the data is; this module puts their answers together and reads the moments people
type.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from core_agent.contracts.errors import UsageError
from core_agent.contracts.metrics import AgentMetrics, MetricsScope
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore

_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)", re.IGNORECASE)
_UNITS = {
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "min": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
SINCE_FORMS = (
    "a duration back from now (30m, 24h, 7d, 2w) or an ISO date or time "
    "(2026-11-20, 2026-11-20T09:30, 2026-11-20T09:30:00+08:00)"
)
"""What ``moment_since`` accepts, as said in its errors and in ``--since``'s help."""


async def collect_metrics(
    tasks: ITaskStore, traces: ITraceStore, scope: MetricsScope
) -> AgentMetrics:
    """Both stores' metrics for ``scope``, as one report.

    Raises:
        StorageError: A store could not be read.
    """
    # One after the other: the spans take nearly all the time, so little is gained side by
    # side, and an error stays itself rather than a group of one.
    task_metrics = await tasks.task_metrics(scope)
    span_metrics = await traces.span_metrics(scope)
    return AgentMetrics.combine(scope, task_metrics, span_metrics)


def moment_since(text: str, *, now: datetime) -> datetime:
    """The moment ``text`` names: a duration back from ``now``, or an ISO date or time.

    ``now`` must be timezone-aware. A date or time without an offset is in ``now``'s time
    zone (pass local time for what a person types); a date alone is its midnight.

    Raises:
        UsageError: ``text`` is neither, or goes back before the year 1 (the message lists
            the accepted forms).
    """
    value = text.strip()
    relative = _RELATIVE.fullmatch(value)
    if relative is not None:
        amount, unit = relative.groups()
        try:
            return now - float(amount) * _UNITS[unit.lower()]
        except OverflowError:  # past what a date holds (year 1), or a duration that long
            raise UsageError(
                f"{text!r} goes back before the first date there is: give {SINCE_FORMS}"
            ) from None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"cannot read {text!r} as a moment: give {SINCE_FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=now.tzinfo)
    return moment
