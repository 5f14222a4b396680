"""``ITaskStore`` on SQLite: sessions, tasks and their event log in one database."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from core_agent.contracts.errors import InvalidTransitionError, TaskNotFoundError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.task_store import ITaskStore
from providers.sqlite.database import SqliteDatabase, transaction
from shared.agent_protocol import (
    AgentEvent,
    TaskEvent,
    TaskRequest,
    TaskState,
    TaskStatus,
    TokenUsage,
)

_EVENTS: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)

_TASK_COLUMNS = (
    "id, session_id, trace_id, status, strategy, input_json, output_json, error_text, "
    "usage_json, created_at, updated_at, tainted, sandbox_json"
)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _row_to_task(row: tuple[Any, ...]) -> TaskState:
    (
        task_id,
        session_id,
        trace_id,
        status,
        strategy,
        input_json,
        output_json,
        error,
        usage_json,
        created_at,
        updated_at,
        tainted,
        sandbox_json,
    ) = row
    return TaskState(
        task_id=task_id,
        session_id=session_id,
        trace_id=trace_id,
        status=TaskStatus(status),
        request=TaskRequest.model_validate_json(input_json),
        strategy=strategy,
        output=json.loads(output_json) if output_json is not None else None,
        error=error,
        usage=TokenUsage.model_validate_json(usage_json),
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
        tainted=bool(tainted),
        sandbox=json.loads(sandbox_json) if sandbox_json else None,
    )


def _insert_event(conn: sqlite3.Connection, event: TaskEvent) -> None:
    conn.execute(
        "INSERT INTO agent_task_events (id, task_id, seq, event_type, payload_json, occurred_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            event.event_id,
            event.task_id,
            event.seq,
            event.kind,
            event.model_dump_json(),
            _iso(event.occurred_at),
        ),
    )
    if event.kind == "task.tainted":
        conn.execute("UPDATE agent_tasks SET tainted = 1 WHERE id = ?", (event.task_id,))


class SqliteTaskStore(ITaskStore):
    """Tasks in ``agent_tasks``, events in ``agent_task_events``, sessions in ``agent_sessions``."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteTaskStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def create_task(self, task: TaskState, queued_event: TaskEvent) -> None:
        """Insert the session if new, the task, and its first event, in one transaction."""
        created = _iso(task.created_at)

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "INSERT INTO agent_sessions (id, created_at, updated_at) VALUES (?, ?, ?)"
                    " ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at",
                    (task.session_id, created, created),
                )
                conn.execute(
                    f"INSERT INTO agent_tasks ({_TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        task.task_id,
                        task.session_id,
                        task.trace_id,
                        task.status.value,
                        task.strategy,
                        task.request.model_dump_json(),
                        json.dumps(task.output) if task.output is not None else None,
                        task.error,
                        task.usage.model_dump_json(),
                        created,
                        _iso(task.updated_at),
                        int(task.tainted),
                        json.dumps(task.sandbox) if task.sandbox is not None else None,
                    ),
                )
                _insert_event(conn, queued_event)

        await self._db.run(write)

    async def get_task(self, task_id: str) -> TaskState:
        """The task, or ``TaskNotFoundError``."""

        def read(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM agent_tasks WHERE id = ?", (task_id,)
            ).fetchone()
            return row

        row = await self._db.run(read)
        if row is None:
            raise TaskNotFoundError(task_id)
        return _row_to_task(row)

    async def list_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        limit: int = 50,
    ) -> list[TaskState]:
        """Newest first, filtered by session and status when given."""
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            clauses.append("status = ?")
            params.append(status.value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM agent_tasks {where}"
                " ORDER BY created_at DESC, rowid DESC LIMIT ?",
                (*params, max(1, limit)),
            ).fetchall()

        return [_row_to_task(row) for row in await self._db.run(read)]

    async def transition(
        self,
        task_id: str,
        *,
        from_status: TaskStatus,
        to_status: TaskStatus,
        event: TaskEvent | None = None,
        strategy: str | None = None,
        output: str | None = None,
        error: str | None = None,
        usage: TokenUsage | None = None,
    ) -> None:
        """Compare-and-set the status, update the outcome fields, append the event: atomically."""
        now = _iso(datetime.now(UTC))

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                cursor = conn.execute(
                    "UPDATE agent_tasks SET status = ?, updated_at = ?,"
                    " strategy = COALESCE(?, strategy),"
                    " output_json = COALESCE(?, output_json),"
                    " error_text = COALESCE(?, error_text),"
                    " usage_json = COALESCE(?, usage_json)"
                    " WHERE id = ? AND status = ?",
                    (
                        to_status.value,
                        now,
                        strategy,
                        json.dumps(output) if output is not None else None,
                        error,
                        usage.model_dump_json() if usage is not None else None,
                        task_id,
                        from_status.value,
                    ),
                )
                if cursor.rowcount == 0:
                    row = conn.execute(
                        "SELECT status FROM agent_tasks WHERE id = ?", (task_id,)
                    ).fetchone()
                    if row is None:
                        raise TaskNotFoundError(task_id)
                    raise InvalidTransitionError(task_id, row[0], to_status.value)
                if event is not None:
                    _insert_event(conn, event)

        await self._db.run(write)

    async def append_event(self, event: TaskEvent) -> None:
        """Append one event to its task's log."""

        def write(conn: sqlite3.Connection) -> None:
            _insert_event(conn, event)

        await self._db.run(write)

    async def list_events(self, task_id: str) -> Sequence[TaskEvent]:
        """The task's events in ``seq`` order."""

        def read(conn: sqlite3.Connection) -> list[tuple[str]]:
            return conn.execute(
                "SELECT payload_json FROM agent_task_events WHERE task_id = ? ORDER BY seq",
                (task_id,),
            ).fetchall()

        rows = await self._db.run(read)
        return [_EVENTS.validate_json(payload) for (payload,) in rows]

    async def close(self) -> None:
        """Close the database connection."""
        await self._db.close()
