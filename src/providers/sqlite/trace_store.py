"""``ITraceStore`` on SQLite: spans in ``agent_traces``."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import ITraceStore, Span
from providers.sqlite.database import SqliteDatabase

_COLUMNS = (
    "id, trace_id, task_id, parent_id, span, kind, status, started_at, ended_at, latency_ms,"
    " token_in, token_out, cost_usd, error_text, payload_json"
)


def _iso(moment: datetime) -> str:
    if moment.tzinfo is not UTC:  # the kernel's moments are in UTC already
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")


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

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteTraceStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def record(self, span: Span) -> None:
        """Insert the span, with the task store's open unit of work if there is one."""
        row = (
            span.span_id,
            span.trace_id,
            span.task_id,
            span.parent_span_id,
            span.name,
            span.kind,
            span.status,
            _iso(span.started_at),
            _iso(span.ended_at),
            span.latency_ms,
            span.tokens_in,
            span.tokens_out,
            span.cost_usd,
            span.error,
            # pydantic-core's encoder: a span is written at every step, and it is a few times
            # faster than the standard library's (same JSON, without spaces).
            to_json(span.attributes, fallback=str).decode(),
        )

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO agent_traces ({_COLUMNS}) VALUES ({','.join('?' * 15)})", row
            )

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

    async def close(self) -> None:
        """Close the database connection."""
        await self._db.close()
