"""``IToolCallLedger`` on SQLite: one row per tool call, keyed by its idempotency key."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core_agent.contracts.errors import CorruptStateError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool_call_ledger import IToolCallLedger, LedgerEntry, LedgerStatus
from providers.sqlite.database import SqliteDatabase
from shared.agent_protocol import ToolResult

_COLUMNS = (
    "idempotency_key, task_id, call_id, tool, arguments_json, idempotent, status, result_json,"
    " started_at, ended_at, note"
)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _entry(row: tuple[Any, ...]) -> LedgerEntry:
    key, task_id, call_id, tool, arguments, idempotent, status, result, started, ended, note = row
    try:
        return LedgerEntry(
            idempotency_key=key,
            task_id=task_id,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            idempotent=bool(idempotent),
            status=status,
            result=ToolResult.model_validate_json(result) if result else None,
            started_at=datetime.fromisoformat(started),
            ended_at=datetime.fromisoformat(ended) if ended else None,
            note=note,
        )
    except (ValueError, ValidationError) as exc:
        raise CorruptStateError(task_id, f"tool call {call_id} cannot be read: {exc}") from exc


class SqliteToolCallLedger(IToolCallLedger):
    """Rows in ``agent_tool_calls``, each write committed at once."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteToolCallLedger:
        """The ledger in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def begin(self, entry: LedgerEntry) -> LedgerEntry:
        """Insert the intent unless the key exists; return what is stored."""
        row = (
            entry.idempotency_key,
            entry.task_id,
            entry.call_id,
            entry.tool,
            entry.arguments,
            int(entry.idempotent),
            entry.status,
            entry.result.model_dump_json() if entry.result is not None else None,
            _iso(entry.started_at),
            _iso(entry.ended_at) if entry.ended_at is not None else None,
            entry.note,
        )

        def write(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            inserted = conn.execute(
                f"INSERT INTO agent_tool_calls ({_COLUMNS}) VALUES ({','.join('?' * 11)})"
                " ON CONFLICT(idempotency_key) DO NOTHING",
                row,
            ).rowcount
            if inserted:
                return None
            # Run again after an interruption: the attempt starts now (see the port).
            conn.execute(
                "UPDATE agent_tool_calls SET started_at = ? "
                "WHERE idempotency_key = ? AND status != 'finished'",
                (row[8], entry.idempotency_key),
            )
            found: tuple[Any, ...] | None = conn.execute(
                f"SELECT {_COLUMNS} FROM agent_tool_calls WHERE idempotency_key = ?",
                (entry.idempotency_key,),
            ).fetchone()
            return found

        # Durable before the tool acts, together with what the step recorded so far.
        existing = await self._db.commit_with(write)
        return entry if existing is None else _entry(existing)

    async def finish(
        self,
        idempotency_key: str,
        result: ToolResult,
        *,
        status: LedgerStatus = "finished",
        note: str | None = None,
    ) -> None:
        """Record the outcome on the call's row."""
        payload = result.model_dump_json()
        ended = _iso(datetime.now(UTC))

        # With the step's unit of work, if one is open: the result, its events and the
        # checkpoint that uses it commit together.
        # A recorded result is never replaced: a process that stalled past its lease and
        # wakes with a late outcome must not overwrite the one the task went on with.
        def update(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE agent_tool_calls SET status = ?, result_json = ?, ended_at = ?,"
                " note = COALESCE(?, note) WHERE idempotency_key = ? AND status != 'finished'",
                (status, payload, ended, note, idempotency_key),
            )

        await self._db.write(update)

    async def entries(self, task_id: str) -> list[LedgerEntry]:
        """The task's calls in the order they started."""

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_COLUMNS} FROM agent_tool_calls WHERE task_id = ?"
                " ORDER BY started_at, rowid",
                (task_id,),
            ).fetchall()

        return [_entry(row) for row in await self._db.run(read)]

    async def close(self) -> None:
        """Release the database handle."""
        await self._db.close()
