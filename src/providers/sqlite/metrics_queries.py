"""The SQL behind ``task_metrics`` and ``span_metrics``: scopes, percentiles, durations.

Percentiles are computed by SQLite with a window function (a sort per group), so a store
of 100k spans answers without a row of them reaching Python; nearest rank, as
``core_agent.contracts.metrics.nearest_rank`` defines it: the ⌈p·n/100⌉-th smallest value.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio.to_thread

from core_agent.contracts.errors import StorageError
from core_agent.contracts.metrics import REFUSED_ERROR_TYPES, LatencyPercentiles, MetricsScope
from providers.sqlite.database import ReaderPool, SqliteDatabase, sqlite_driver

T = TypeVar("T")


def iso(moment: datetime) -> str:
    """A moment as the stores write it (UTC, microseconds), so text order is time order."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def task_condition(scope: MetricsScope, *, alias: str = "") -> tuple[str, list[Any]]:
    """A condition on ``agent_tasks`` rows (named ``alias``) selecting the tasks in scope.

    ``created_at >= ?`` and ``session_id = ?`` are ranges of the indexes
    ``agent_tasks_by_created`` and ``agent_tasks_by_session``.
    """
    prefix = f"{alias}." if alias else ""
    clauses: list[str] = []
    params: list[Any] = []
    if scope.since is not None:
        clauses.append(f"{prefix}created_at >= ?")
        params.append(iso(scope.since))
    if scope.session_id is not None:
        clauses.append(f"{prefix}session_id = ?")
        params.append(scope.session_id)
    return (" AND ".join(clauses) or "1"), params


def task_id_condition(scope: MetricsScope, column: str) -> tuple[str, list[Any]]:
    """A condition on ``column`` (a task id) selecting the rows of the tasks in scope.

    With no scope there is nothing to look up; otherwise the tasks are found by index and
    their rows through ``column``'s index (``agent_traces_by_task``, ``agent_approvals_by_task``).
    """
    condition, params = task_condition(scope)
    if condition == "1":
        return condition, params
    return f"{column} IN (SELECT id FROM agent_tasks WHERE {condition})", params


def grouped_percentiles(source: str, *, extra: str = "") -> str:
    """A query of per-group counts, aggregates and percentiles over ``source``'s rows.

    ``source`` is a ``SELECT`` whose columns include ``g`` (the group) and ``v`` (the value,
    never NULL). Each result row is ``g``, the group's row count, the ``extra`` aggregates,
    then the 50th and 95th percentiles of ``v``; ordered by ``g``.

    One window, ``CUME_DIST``: the share of the group's values at most ``v``. The
    nearest-rank p-th percentile is the smallest ``v`` whose share reaches p/100 (the
    ⌈p·n/100⌉-th value is the first with that many at or below it). The share is a double
    ``c / n``, which equals the literal ``p / 100`` exactly when the fractions are equal, so
    the comparison is exact. (A ``ROW_NUMBER`` and a ``COUNT`` window took twice as long.)
    """
    return (
        f"SELECT g, COUNT(*){', ' + extra if extra else ''},"
        " MIN(CASE WHEN share >= 0.5 THEN v END), MIN(CASE WHEN share >= 0.95 THEN v END)"
        " FROM (SELECT *, CUME_DIST() OVER (PARTITION BY g ORDER BY v) AS share"
        f" FROM ({source}))"
        " GROUP BY g ORDER BY g"
    )


def percentiles(count: int, p50: float | None, p95: float | None) -> LatencyPercentiles:
    """A row's count and percentiles as the port's type."""
    return LatencyPercentiles(count=count, p50_ms=p50, p95_ms=p95)


def milliseconds_between(start: str, end: str) -> str:
    """SQL for the milliseconds from ``start`` to ``end``, two columns written by ``iso``.

    ``julianday`` reads only milliseconds, so whole seconds come from it (rounded: a
    difference of Julian days is not exact in floating point) and the microseconds from the
    text; other ISO forms fall back to ``julianday`` alone.
    """
    exact = (
        f"ROUND((julianday(substr({end}, 1, 19)) - julianday(substr({start}, 1, 19)))"
        f" * 86400.0) * 1000.0 + (CAST(substr({end}, 21, 6) AS INTEGER)"
        f" - CAST(substr({start}, 21, 6) AS INTEGER)) / 1000.0"
    )
    rough = f"(julianday({end}) - julianday({start})) * 86400000.0"
    shaped = " AND ".join(
        f"length({column}) = 32 AND substr({column}, 20, 1) = '.'" for column in (start, end)
    )
    return f"(CASE WHEN {shaped} THEN {exact} ELSE {rough} END)"


def refused_error_types() -> str:
    """``REFUSED_ERROR_TYPES`` as an SQL list of literals (they are Python identifiers)."""
    names = sorted(REFUSED_ERROR_TYPES)
    assert all(name.isidentifier() for name in names)
    return ", ".join(f"'{name}'" for name in names)


async def read_snapshot(
    database: SqliteDatabase, readers: ReaderPool, fn: Callable[[sqlite3.Connection], T]
) -> T:
    """``fn(connection)`` in one read transaction (its queries see one state of the data).

    On a reader connection in a worker thread, so a long aggregate does not hold up the
    event loop or the kernel's connection; on the kernel's own for an in-memory database,
    which other connections cannot see.
    """

    def snapshot(conn: sqlite3.Connection) -> T:
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("ROLLBACK")

    if str(database.path) == ":memory:":
        return await database.run(snapshot)
    errors = (sqlite_driver().Error, sqlite3.Error)
    try:
        return await anyio.to_thread.run_sync(readers.call, snapshot)
    except errors as exc:
        raise StorageError(f"database {database.path}: {exc}") from exc
