"""``ILexicalIndex`` on SQLite FTS5 in the kernel's database: persistent and incremental.

Passages are indexed with the Porter stemmer over ``unicode61`` (diacritics folded); queries
become an OR of quoted terms, so no user input is read as FTS5 syntax, and rank by FTS5's
built-in BM25. One FTS table holds every namespace, so term statistics (IDF) are shared
across namespaces.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from core_agent.contracts.errors import UsageError
from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit
from core_agent.contracts.settings import AgentSettings
from providers.lexical.passages import check_passages, query_terms
from providers.sqlite.database import SqliteDatabase, transaction


class Fts5LexicalIndex(ILexicalIndex):
    """BM25 keyword search with SQLite FTS5 (see the module docstring)."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> Fts5LexicalIndex:
        """The index in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def add(self, namespace: str, passages: Sequence[tuple[str, str]]) -> None:
        """Index or re-index passages in one transaction."""
        check_passages(passages)
        if not passages:
            return

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                for passage_id, text in passages:
                    row = conn.execute(
                        "SELECT rowid FROM agent_lexical_passages WHERE namespace = ? AND id = ?",
                        (namespace, passage_id),
                    ).fetchone()
                    if row is None:
                        rowid = conn.execute(
                            "INSERT INTO agent_lexical_passages (namespace, id) VALUES (?, ?)",
                            (namespace, passage_id),
                        ).lastrowid
                    else:
                        rowid = row[0]
                        conn.execute("DELETE FROM agent_lexical_fts WHERE rowid = ?", (rowid,))
                    conn.execute(
                        "INSERT INTO agent_lexical_fts (rowid, text) VALUES (?, ?)", (rowid, text)
                    )

        await self._db.run(write)

    async def search(self, namespace: str, query: str, k: int) -> list[LexicalHit]:
        """BM25 over FTS5; the score is FTS5's ``bm25()`` negated (larger is better)."""
        if k < 1:
            raise UsageError(f"k must be at least 1, got {k}")
        words = query_terms(query)
        if not words:
            return []
        match = " OR ".join('"' + word.replace('"', '""') + '"' for word in words)

        def read(conn: sqlite3.Connection) -> list[LexicalHit]:
            rows = conn.execute(
                "SELECT p.id, bm25(agent_lexical_fts) AS score, agent_lexical_fts.text"
                " FROM agent_lexical_fts JOIN agent_lexical_passages p"
                "   ON p.rowid = agent_lexical_fts.rowid"
                " WHERE agent_lexical_fts MATCH ? AND p.namespace = ?"
                " ORDER BY score LIMIT ?",
                (match, namespace, k),
            ).fetchall()
            return [LexicalHit(id=row[0], score=-float(row[1]), text=row[2]) for row in rows]

        return await self._db.run(read)

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Remove passages in one transaction; returns how many existed."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0

        def write(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                rows = conn.execute(
                    "SELECT rowid FROM agent_lexical_passages"
                    " WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
                    (namespace, json.dumps(wanted)),
                ).fetchall()
                for (rowid,) in rows:
                    conn.execute("DELETE FROM agent_lexical_fts WHERE rowid = ?", (rowid,))
                    conn.execute("DELETE FROM agent_lexical_passages WHERE rowid = ?", (rowid,))
                return len(rows)

        return await self._db.run(write)

    async def count(self, namespace: str) -> int:
        """Passages in the namespace."""
        row = await self._db.run(
            lambda conn: conn.execute(
                "SELECT count(*) FROM agent_lexical_passages WHERE namespace = ?", (namespace,)
            ).fetchone()
        )
        return int(row[0])

    async def close(self) -> None:
        """Close the database connection."""
        await self._db.close()
