"""``ICheckpointStore`` on SQLite: a JSON document per task and key, and its message log."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from core_agent.contracts.checkpoint_store import C, Checkpoint, ICheckpointStore
from core_agent.contracts.errors import CorruptStateError
from core_agent.contracts.settings import AgentSettings
from providers.sqlite.database import SqliteDatabase
from shared.agent_protocol import ChatMessage

_MESSAGE: TypeAdapter[ChatMessage] = TypeAdapter(ChatMessage)


class SqliteCheckpointStore(ICheckpointStore):
    """Checkpoints in ``agent_checkpoints``, their messages in ``agent_task_messages``.

    Writes join the task store's open unit of work (they share the database handle).
    """

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteCheckpointStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def save(self, task_id: str, key: str, checkpoint: Checkpoint) -> None:
        """Insert or replace the checkpoint (an upsert is one atomic statement)."""
        payload = checkpoint.model_dump_json()
        now = datetime.now(UTC).isoformat(timespec="microseconds")

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO agent_checkpoints (task_id, key, state_json, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(task_id, key) DO UPDATE SET"
                " state_json = excluded.state_json, updated_at = excluded.updated_at",
                (task_id, key, payload, now, now),
            )

        await self._db.write(write)

    async def load(self, task_id: str, key: str, model: type[C]) -> C | None:
        """The saved checkpoint as ``model``, or ``None``."""

        def read(conn: sqlite3.Connection) -> tuple[str] | None:
            row: tuple[str] | None = conn.execute(
                "SELECT state_json FROM agent_checkpoints WHERE task_id = ? AND key = ?",
                (task_id, key),
            ).fetchone()
            return row

        row = await self._db.run(read)
        if row is None:
            return None
        try:
            return model.model_validate_json(row[0])
        except ValidationError as exc:
            raise CorruptStateError(
                task_id, f"checkpoint {key!r} is not a valid {model.__name__}: {exc}"
            ) from exc

    async def append_messages(
        self, task_id: str, key: str, first: int, messages: Sequence[ChatMessage]
    ) -> None:
        """Upsert the messages at their positions."""
        if not messages:
            return
        rows = [
            (task_id, key, first + offset, _MESSAGE.dump_json(message).decode())
            for offset, message in enumerate(messages)
        ]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO agent_task_messages (task_id, scope, position, message_json)"
                " VALUES (?, ?, ?, ?) ON CONFLICT(task_id, scope, position) DO UPDATE SET"
                " message_json = excluded.message_json",
                rows,
            )

        await self._db.write(write)

    async def load_messages(self, task_id: str, key: str, count: int) -> list[ChatMessage]:
        """The first ``count`` messages, checked for gaps."""

        def read(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            return conn.execute(
                "SELECT position, message_json FROM agent_task_messages"
                " WHERE task_id = ? AND scope = ? AND position < ? ORDER BY position",
                (task_id, key, count),
            ).fetchall()

        rows = await self._db.run(read)
        if len(rows) != count or (rows and rows[-1][0] != count - 1):
            raise CorruptStateError(
                task_id, f"the conversation of {key!r} has {len(rows)} of its {count} messages"
            )
        messages = []
        for position, payload in rows:
            try:
                messages.append(_MESSAGE.validate_json(payload))
            except ValidationError as exc:
                raise CorruptStateError(
                    task_id, f"message {position} of {key!r} cannot be read: {exc}"
                ) from exc
        return messages

    async def list_keys(self, task_id: str) -> list[str]:
        """Keys in the order they were first saved."""

        def read(conn: sqlite3.Connection) -> list[tuple[str]]:
            return conn.execute(
                "SELECT key FROM agent_checkpoints WHERE task_id = ? ORDER BY created_at, rowid",
                (task_id,),
            ).fetchall()

        return [key for (key,) in await self._db.run(read)]

    async def close(self) -> None:
        """Release the database handle."""
        await self._db.close()
