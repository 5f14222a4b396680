"""``IMemoryStore`` on SQLite: the ``agent_memories`` table of the kernel's database."""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core_agent.contracts.errors import UsageError
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem, MemoryScope
from core_agent.contracts.settings import AgentSettings
from providers.sqlite.database import SqliteDatabase, transaction

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_KEY_CHARS = 256
MAX_VALUE_BYTES = 1_000_000
SCOPES = ("session", "long_term")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _item(row: tuple[Any, ...]) -> MemoryItem:
    scope, namespace, key, value_json, created, updated, tainted = row
    return MemoryItem(
        scope=scope,
        namespace=namespace,
        key=key,
        value=json.loads(value_json),
        created_at=datetime.fromisoformat(created),
        updated_at=datetime.fromisoformat(updated),
        tainted=bool(tainted),
    )


def _check_address(scope: str, namespace: str, key: str) -> None:
    if scope not in SCOPES:
        raise UsageError(f"memory scope must be one of {SCOPES}, not {scope!r}")
    if not isinstance(namespace, str) or not namespace:
        raise UsageError("memory namespace must be a non-empty string")
    if not isinstance(key, str) or not key.strip():
        raise UsageError("memory key must be a non-empty string")
    if len(key) > MAX_KEY_CHARS:
        raise UsageError(f"memory key is longer than {MAX_KEY_CHARS} characters")


def _like(word: str) -> str:
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class SqliteMemoryStore(IMemoryStore):
    """Facts and preferences by scope, namespace and key; a write replaces the key's value."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteMemoryStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def put(
        self, scope: MemoryScope, namespace: str, key: str, value: Any, *, tainted: bool = False
    ) -> MemoryItem:
        """Insert or replace atomically; ``created_at`` survives replacement."""
        _check_address(scope, namespace, key)
        try:
            value_json = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"memory {key!r}: the value is not JSON-serializable: {exc}") from exc
        if len(value_json.encode()) > MAX_VALUE_BYTES:
            raise UsageError(f"memory {key!r}: the value is larger than {MAX_VALUE_BYTES} bytes")
        now = _now()

        def write(conn: sqlite3.Connection) -> MemoryItem:
            with transaction(conn):
                conn.execute(
                    "INSERT INTO agent_memories"
                    " (id, scope, namespace, key, value_json, created_at, updated_at, tainted)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (scope, namespace, key) DO UPDATE SET"
                    "   value_json = excluded.value_json, updated_at = excluded.updated_at,"
                    "   tainted = excluded.tainted",
                    (uuid.uuid4().hex, scope, namespace, key, value_json, now, now, int(tainted)),
                )
                row = conn.execute(
                    "SELECT scope, namespace, key, value_json, created_at, updated_at, tainted"
                    " FROM agent_memories WHERE scope = ? AND namespace = ? AND key = ?",
                    (scope, namespace, key),
                ).fetchone()
            return _item(row)

        return await self._db.run(write)

    async def get(self, scope: MemoryScope, namespace: str, key: str) -> MemoryItem | None:
        """The item under the key, or ``None``."""
        _check_address(scope, namespace, key)
        row = await self._db.run(
            lambda conn: conn.execute(
                "SELECT scope, namespace, key, value_json, created_at, updated_at, tainted"
                " FROM agent_memories WHERE scope = ? AND namespace = ? AND key = ?",
                (scope, namespace, key),
            ).fetchone()
        )
        return _item(row) if row is not None else None

    async def search(
        self, scope: MemoryScope, namespace: str, query: str, limit: int = 10
    ) -> list[MemoryItem]:
        """Items containing the most words of ``query``, then the most recent."""
        if limit < 1:
            raise UsageError(f"limit must be at least 1, got {limit}")
        words = list(dict.fromkeys(_WORD.findall(query.lower())))[:16]
        matched = " + ".join(
            "((lower(key) LIKE ? ESCAPE '\\') OR (lower(value_json) LIKE ? ESCAPE '\\'))"
            for _ in words
        )
        params: list[Any] = []
        for word in words:
            params += [_like(word), _like(word)]
        score = matched or "0"
        # The limit is written into the statement, not bound: SQLite re-prepares a statement
        # whose LIMIT is a bound parameter at every execution (it plans with the value),
        # which cost 35-50 us a search against 8 us; every task's recall makes one or two.
        sql = (
            "SELECT scope, namespace, key, value_json, created_at, updated_at, tainted FROM ("
            f"  SELECT *, ({score}) AS hits FROM agent_memories"
            "   WHERE scope = ? AND namespace = ?)"
            f" {'WHERE hits > 0' if words else ''}"
            f" ORDER BY hits DESC, updated_at DESC LIMIT {int(limit)}"
        )
        rows = await self._db.run(
            lambda conn: conn.execute(sql, (*params, scope, namespace)).fetchall()
        )
        return [_item(row) for row in rows]

    async def delete(self, scope: MemoryScope, namespace: str, key: str) -> bool:
        """Remove the key; ``True`` when it existed."""
        _check_address(scope, namespace, key)

        def write(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "DELETE FROM agent_memories WHERE scope = ? AND namespace = ? AND key = ?",
                (scope, namespace, key),
            )
            return cursor.rowcount > 0

        return await self._db.run(write)

    async def close(self) -> None:
        """Close the database connection."""
        await self._db.close()
