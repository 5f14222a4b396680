"""``ILexicalIndex`` on SQLite FTS5 in the kernel's database: persistent and incremental.

Each namespace has its own FTS5 table, so a search never filters other namespaces' rows out
(a join per match cost more than the search itself) and term statistics (IDF) are the
namespace's own. ``agent_lexical_passages`` maps passage ids to FTS rowids. Passages are
indexed with the Porter stemmer over ``unicode61`` (diacritics folded); a query becomes an OR
of quoted terms, so no user input is read as FTS5 syntax, ranked by FTS5's built-in BM25.

Only the column ``terms`` is indexed: the passage as ``cjk_segmentation.segmented``
rewrites it (NFKC, Chinese and Japanese cut into words separated by spaces, CJK set apart from
the digits and Latin letters written against it), so ``unicode61`` sees each word, number and
model number as a token; a query's words are made the same way. ``text`` (unindexed) keeps
the passage as written, and is NULL where that is the same string, as for English, so such
text is stored once. The trigram tokenizer was the alternative: it needs no segmenter but
matches nothing for a query or word under three characters, and most Chinese words have two.
On the Chinese set of ``benchmarks/keyword_zh_eval.py`` it found the right document first for
62% of the queries, against 100% with segmented words (and 6% before either); it would also
lose English stemming.
Tables made before are rebuilt by schema migrations 7 (Chinese words) and 13 (this layout).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread

from core_agent.contracts.errors import StorageError
from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit
from core_agent.contracts.settings import AgentSettings
from providers.lexical.cjk_segmentation import segmented
from providers.lexical.passages import check_passages, search_terms
from providers.sqlite.database import ReaderPool, SqliteDatabase, sqlite_driver, transaction

TOKENIZER = "porter unicode61 remove_diacritics 2"
COLUMNS = "text UNINDEXED, terms"
"""The passage as written (NULL when it is its own terms), and the text that is indexed."""


def create_table(conn: sqlite3.Connection, table: str) -> None:
    """Create one namespace's FTS5 table (the schema migration 13 rebuilds old tables to)."""
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({COLUMNS}, tokenize = '{TOKENIZER}')")


def columns(text: str) -> tuple[str | None, str]:
    """The ``text`` and ``terms`` columns of a passage."""
    terms = segmented(text)
    return (None if terms == text else text), terms


def _table(conn: sqlite3.Connection, namespace: str) -> str | None:
    row = conn.execute(
        "SELECT table_name FROM agent_lexical_namespaces WHERE namespace = ?", (namespace,)
    ).fetchone()
    return str(row[0]) if row else None


class Fts5LexicalIndex(ILexicalIndex):
    """BM25 keyword search with SQLite FTS5 (see the module docstring)."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)
        self._readers = ReaderPool(path)
        self._driver_errors = (sqlite_driver().Error, sqlite3.Error)

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
                table = _table(conn, namespace)
                if table is None:
                    table = f"agent_fts_{uuid.uuid4().hex[:16]}"
                    create_table(conn, table)
                    conn.execute(
                        "INSERT INTO agent_lexical_namespaces (namespace, table_name)"
                        " VALUES (?, ?)",
                        (namespace, table),
                    )
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
                        conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
                    conn.execute(
                        f"INSERT INTO {table} (rowid, text, terms) VALUES (?, ?, ?)",
                        (rowid, *columns(text)),
                    )

        await self._db.run(write)

    async def search(self, namespace: str, query: str, k: int) -> list[LexicalHit]:
        """BM25 over FTS5; the score is FTS5's ``bm25()`` negated (larger is better)."""
        words = search_terms(query, k)
        if not words:
            return []
        match = " OR ".join('"' + word.replace('"', '""') + '"' for word in words)

        table = await self._db.run(lambda conn: _table(conn, namespace))
        if table is None:
            return []
        # FTS5 scores every passage holding any term before sorting (milliseconds on a large
        # namespace): that runs on a read connection in a worker thread, not on the event
        # loop. The text is read for the k best only, not carried through the sort.
        sql = (
            f"SELECT p.id, ranked.score, coalesce(f.text, f.terms) FROM ("
            f"  SELECT rowid, bm25({table}) AS score FROM {table}"
            f"  WHERE {table} MATCH ? ORDER BY score LIMIT ?) AS ranked"
            " JOIN agent_lexical_passages p ON p.rowid = ranked.rowid"
            f" JOIN {table} f ON f.rowid = ranked.rowid"
            " ORDER BY ranked.score"
        )
        try:
            rows = await anyio.to_thread.run_sync(self._readers.run, sql, (match, k))
        except self._driver_errors as exc:
            raise StorageError(f"keyword search in {namespace!r}: {exc}") from exc
        return [LexicalHit(id=row[0], score=-float(row[1]), text=row[2]) for row in rows]

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Remove passages in one transaction; returns how many existed."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0

        def write(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                table = _table(conn, namespace)
                if table is None:
                    return 0
                rows = conn.execute(
                    "SELECT rowid FROM agent_lexical_passages"
                    " WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
                    (namespace, json.dumps(wanted)),
                ).fetchall()
                for (rowid,) in rows:
                    conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
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
        """Close the database connection and the read connections."""
        await self._db.close()
        self._readers.close()
