"""``ICheckpointStore`` on SQLite: one JSON document per task and key."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from providers.sqlite.database import SqliteDatabase


class SqliteCheckpointStore(ICheckpointStore):
    """Checkpoints in ``agent_checkpoints``; a save replaces the previous one atomically."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteCheckpointStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def save(self, task_id: str, key: str, state: dict[str, Any]) -> None:
        """Insert or replace the checkpoint (an upsert is one atomic statement)."""
        try:
            payload = json.dumps(state, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"checkpoint {key!r} is not JSON-serializable: {exc}") from exc
        now = datetime.now(UTC).isoformat(timespec="microseconds")

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO agent_checkpoints (task_id, key, state_json, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(task_id, key) DO UPDATE SET"
                " state_json = excluded.state_json, updated_at = excluded.updated_at",
                (task_id, key, payload, now, now),
            )

        await self._db.run(write)

    async def load(self, task_id: str, key: str) -> dict[str, Any] | None:
        """The saved state, or ``None``."""

        def read(conn: sqlite3.Connection) -> tuple[str] | None:
            row: tuple[str] | None = conn.execute(
                "SELECT state_json FROM agent_checkpoints WHERE task_id = ? AND key = ?",
                (task_id, key),
            ).fetchone()
            return row

        row = await self._db.run(read)
        if row is None:
            return None
        state: dict[str, Any] = json.loads(row[0])
        return state

    async def list_keys(self, task_id: str) -> list[str]:
        """Keys in the order they were first saved."""

        def read(conn: sqlite3.Connection) -> list[tuple[str]]:
            return conn.execute(
                "SELECT key FROM agent_checkpoints WHERE task_id = ? ORDER BY created_at, rowid",
                (task_id,),
            ).fetchall()

        return [key for (key,) in await self._db.run(read)]

    async def close(self) -> None:
        """Close the database connection."""
        await self._db.close()
