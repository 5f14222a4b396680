"""``ITraceStore`` on SQLite: spans in ``agent_traces``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from core_agent.contracts.errors import UsageError
from core_agent.contracts.metrics import (
    KindLatency,
    MetricsScope,
    ModelMetrics,
    SpanMetrics,
    TokenTotals,
    ToolMetrics,
)
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import ITraceStore, Span
from providers.sqlite.database import ReaderPool, SqliteDatabase
from providers.sqlite.metrics_queries import (
    grouped_percentiles,
    percentiles,
    read_snapshot,
    refused_error_types,
    task_id_condition,
)

_COLUMNS = (
    "id, trace_id, task_id, parent_id, span, kind, status, started_at, ended_at, latency_ms,"
    " token_in, token_out, cost_usd, error_text, payload_json"
)
_INSERT = f"INSERT INTO agent_traces ({_COLUMNS}) VALUES ({','.join('?' * 15)})"


_SECONDS: dict[tuple[int, ...], str] = {}
"""The ISO text of the last few seconds spans started or ended in, by their fields."""


def _iso(moment: datetime) -> str:
    """``moment.isoformat(timespec="microseconds")`` in UTC, in a third of its time.

    Two per span written: the text of the second is made once for all the spans in it.
    """
    if moment.tzinfo is not UTC:  # the kernel's moments are in UTC already
        moment = moment.astimezone(UTC)
    key = (moment.second, moment.minute, moment.hour, moment.day, moment.month, moment.year)
    second = _SECONDS.get(key)
    if second is None:
        if len(_SECONDS) >= 16:
            _SECONDS.clear()
        second = _SECONDS[key] = moment.replace(microsecond=0, tzinfo=None).isoformat()
    return f"{second}.{moment.microsecond:06d}+00:00"


def _row_to_span(row: tuple[Any, ...]) -> Span:
    (
        span_id,
        trace_id,
        task_id,
        parent_id,
        name,
        kind,
        status,
        started_at,
        ended_at,
        _latency,
        token_in,
        token_out,
        cost,
        error,
        payload,
    ) = row
    return Span(
        span_id=span_id,
        trace_id=trace_id,
        task_id=task_id,
        parent_span_id=parent_id,
        name=name,
        kind=kind,
        status=status,
        started_at=datetime.fromisoformat(started_at),
        ended_at=datetime.fromisoformat(ended_at),
        tokens_in=token_in,
        tokens_out=token_out,
        cost_usd=cost,
        error=error,
        attributes=json.loads(payload),
    )


class SqliteTraceStore(ITraceStore):
    """One row per finished span; latency is stored for queries that aggregate it."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)
        self._readers = ReaderPool(path)  # connects on first use: only stats read here

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteTraceStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """See ``ITraceStore.after_commit``: after the open unit of work on this database."""
        return self._db.after_commit(callback)

    async def record(self, span: Span) -> None:
        """Insert the span, with the task store's open unit of work if there is one."""
        started, ended = span.started_at, span.ended_at
        row = (
            span.span_id,
            span.trace_id,
            span.task_id,
            span.parent_span_id,
            span.name,
            span.kind,
            span.status,
            _iso(started),
            _iso(ended),
            (ended - started).total_seconds() * 1000.0,
            span.tokens_in,
            span.tokens_out,
            span.cost_usd,
            span.error,
            # pydantic-core's encoder: a span is written at every step, and it is a few times
            # faster than the standard library's (same JSON, without spaces).
            to_json(span.attributes, fallback=str).decode(),
        )

        def write(conn: sqlite3.Connection) -> None:
            # One statement for every span, its empty columns bound as None: a second text
            # (NULL written in it) was cheaper to bind but cost the step more than it saved,
            # the tool-call ledger's statements then taking twice as long.
            conn.execute(_INSERT, row)

        await self._db.write(write)

    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """Spans by task or trace, in start order."""
        if task_id is None and trace_id is None:
            raise UsageError("list_spans needs task_id or trace_id")

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            order = " ORDER BY started_at, rowid"
            if task_id is not None:
                query = f"SELECT {_COLUMNS} FROM agent_traces WHERE task_id = ?{order}"
                return conn.execute(query, (task_id,)).fetchall()
            # Spans are indexed by task only (migration 10): a trace is found through its
            # task, or by reading them all when no stored task has it.
            found = conn.execute("SELECT id FROM agent_tasks WHERE trace_id = ?", (trace_id,))
            tasks = [row[0] for row in found]
            where = " OR ".join(["task_id = ?"] * len(tasks)) or "1"
            query = f"SELECT {_COLUMNS} FROM agent_traces WHERE ({where}) AND trace_id = ?{order}"
            return conn.execute(query, (*tasks, trace_id)).fetchall()

        return [_row_to_span(row) for row in await self._db.run(read)]

    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        """See ``ITraceStore.span_metrics``: four aggregate queries in one read transaction.

        The spans of the tasks in scope are found through ``agent_traces_by_task`` (the tasks
        through ``agent_tasks_by_created`` or ``agent_tasks_by_session``); with no scope the
        table is scanned. Percentiles sort each group's latencies in SQLite. An index in
        latency order would spare that sort, but every span written would then touch a page
        at a random place in it (15–35 % more time per span recorded on its own, measured
        at 100k spans), on the path every step takes, for a report read now and then. The
        payload's JSON is read only where the answer needs it (the model of an ``llm`` span
        that fell back, the error type of a failed ``tool`` span, whether an ``ok`` one was
        suspended), and a cheap text search comes before parsing.
        """
        condition, params = task_id_condition(scope, "task_id")

        def read(conn: sqlite3.Connection) -> SpanMetrics:
            tokens = conn.execute(
                "SELECT COALESCE(SUM(token_in), 0), COALESCE(SUM(token_out), 0), SUM(cost_usd)"
                " FROM agent_traces WHERE kind NOT IN ('task', 'run', 'llm_attempt')"
                f" AND {condition}",
                params,
            ).fetchone()
            kinds = conn.execute(
                grouped_percentiles(
                    f"SELECT kind AS g, latency_ms AS v FROM agent_traces WHERE {condition}"
                ),
                params,
            ).fetchall()
            models = conn.execute(
                grouped_percentiles(
                    "SELECT CASE WHEN instr(payload_json, '\"fallback_model\"') THEN"
                    " COALESCE(json_extract(payload_json, '$.fallback_model'), span)"
                    " ELSE span END AS g, latency_ms AS v, status, token_in, token_out, cost_usd"
                    f" FROM agent_traces WHERE kind = 'llm' AND {condition}",
                    extra="SUM(status = 'error'), COALESCE(SUM(token_in), 0),"
                    " COALESCE(SUM(token_out), 0), SUM(cost_usd)",
                ),
                params,
            ).fetchall()
            refused = refused_error_types()
            tools = conn.execute(
                grouped_percentiles(
                    "SELECT span AS g, latency_ms AS v, status, CASE WHEN status = 'error'"
                    " THEN json_extract(payload_json, '$.error_type') END AS error_type"
                    f" FROM agent_traces WHERE kind = 'tool' AND {condition}"
                    " AND NOT (status = 'ok' AND instr(payload_json, '\"suspended\"')"
                    " AND json_extract(payload_json, '$.suspended') IS NOT NULL)",
                    extra=f"SUM(status = 'error' AND COALESCE(error_type NOT IN ({refused}), 1)),"
                    f" SUM(COALESCE(error_type IN ({refused}), 0))",
                ),
                params,
            ).fetchall()
            return SpanMetrics(
                tokens=TokenTotals(input=tokens[0], output=tokens[1], cost_usd=tokens[2]),
                latency_by_kind=[
                    KindLatency(kind=kind, latency=percentiles(count, p50, p95))
                    for kind, count, p50, p95 in kinds
                ],
                models=sorted(
                    (
                        ModelMetrics(
                            model=model,
                            calls=calls,
                            errors=errors,
                            input_tokens=tokens_in,
                            output_tokens=tokens_out,
                            cost_usd=cost,
                            latency=percentiles(calls, p50, p95),
                        )
                        for model, calls, errors, tokens_in, tokens_out, cost, p50, p95 in models
                    ),
                    key=lambda m: (-m.calls, m.model),
                ),
                tools=sorted(
                    (
                        ToolMetrics(
                            tool=tool,
                            calls=calls,
                            errors=errors,
                            refused=refused_calls,
                            latency=percentiles(calls, p50, p95),
                        )
                        for tool, calls, errors, refused_calls, p50, p95 in tools
                    ),
                    key=lambda t: (-t.calls, t.tool),
                ),
            )

        return await read_snapshot(self._db, self._readers, read)

    async def close(self) -> None:
        """Close the database connection (and the one stats were read on)."""
        await self._db.close()
        self._readers.close()
