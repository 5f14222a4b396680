"""A database that refuses some writes, as a full disk or a broken row would: a SQLite trigger."""

from __future__ import annotations

from pathlib import Path

from providers.sqlite.database import SqliteDatabase


async def refuse_inserts(path: Path, name: str, table: str, when: str = "1") -> None:
    """Make every insert into ``table`` for which ``when`` holds fail with ``ABORT``."""
    database = SqliteDatabase.open(path)
    try:
        database.call(
            lambda conn: conn.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON {table} WHEN {when}"
                f" BEGIN SELECT RAISE(ABORT, '{name}'); END"
            )
        )
    finally:
        await database.close()
