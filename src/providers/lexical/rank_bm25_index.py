"""``ILexicalIndex`` with rank-bm25 (Okapi BM25 in Python), passages kept in SQLite.

rank-bm25 scores in memory: the model for a namespace is built from the stored passages on
the first search after a change (seen through ``PRAGMA data_version`` for other processes'
writes and the shared connection's change count for this one's) and scores every passage per
query. Simple and exact, but a search costs
time proportional to the corpus (about 150 ms at 100k passages; see
``benchmarks/retrieval.py``), which is why it is not the default.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from rank_bm25 import BM25Okapi

from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit
from core_agent.contracts.settings import AgentSettings
from providers.lexical.passages import check_passages, search_terms, terms
from providers.sqlite.database import SqliteDatabase, transaction


def _version(conn: sqlite3.Connection) -> tuple[int, int]:
    return int(conn.execute("PRAGMA data_version").fetchone()[0]), conn.total_changes


class _PositiveIdfBM25(BM25Okapi):  # type: ignore[misc]
    """Okapi BM25 with Lucene's IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))``.

    rank-bm25's own IDF goes negative for a term in more than half the passages and floors
    it at a fraction of the average IDF, which is itself negative or zero in a small
    namespace: a one-passage namespace then matched nothing at all.
    """

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


@dataclass(frozen=True, slots=True)
class _Model:
    version: tuple[int, int]
    ids: list[str]
    texts: list[str]
    bm25: Any


class RankBM25LexicalIndex(ILexicalIndex):
    """Okapi BM25 from the rank-bm25 package (see the module docstring)."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)
        self._models: dict[str, _Model] = {}

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> RankBM25LexicalIndex:
        """The passages in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def add(self, namespace: str, passages: Sequence[tuple[str, str]]) -> None:
        """Store passages in one transaction; the model is rebuilt on the next search."""
        check_passages(passages)
        if not passages:
            return

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.executemany(
                    "INSERT INTO agent_bm25_passages (namespace, id, text) VALUES (?, ?, ?)"
                    " ON CONFLICT (namespace, id) DO UPDATE SET text = excluded.text",
                    [(namespace, pid, text) for pid, text in passages],
                )

        await self._db.run(write)

    async def search(self, namespace: str, query: str, k: int) -> list[LexicalHit]:
        """Score every passage of the namespace; the ``k`` best with a positive score."""
        words = search_terms(query, k)
        if not words:
            return []
        model = await self._model(namespace)
        if model is None:
            return []

        def score() -> list[LexicalHit]:
            scores = model.bm25.get_scores(words)
            ranked = sorted(
                (i for i in range(len(model.ids)) if scores[i] > 0),
                key=lambda i: (-scores[i], model.ids[i]),
            )[:k]
            return [
                LexicalHit(id=model.ids[i], score=float(scores[i]), text=model.texts[i])
                for i in ranked
            ]

        hits: list[LexicalHit] = await anyio.to_thread.run_sync(score)
        return hits

    async def _model(self, namespace: str) -> _Model | None:
        # data_version moves with other connections' commits, total_changes with this
        # process's (its stores share one connection).
        version = await self._db.run(_version)
        cached = self._models.get(namespace)
        if cached is not None and cached.version == version:
            return cached
        rows = await self._db.run(
            lambda conn: conn.execute(
                "SELECT id, text FROM agent_bm25_passages WHERE namespace = ? ORDER BY id",
                (namespace,),
            ).fetchall()
        )
        if not rows:
            self._models.pop(namespace, None)
            return None
        ids = [row[0] for row in rows]
        corpus = [terms(row[1]) or [""] for row in rows]
        bm25 = await anyio.to_thread.run_sync(_PositiveIdfBM25, corpus)
        model = _Model(version, ids, [row[1] for row in rows], bm25)
        self._models[namespace] = model
        return model

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Remove passages; returns how many existed."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0

        def write(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                cursor = conn.execute(
                    "DELETE FROM agent_bm25_passages"
                    " WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
                    (namespace, json.dumps(wanted)),
                )
                return int(cursor.rowcount)

        deleted = await self._db.run(write)
        return deleted

    async def count(self, namespace: str) -> int:
        """Passages in the namespace."""
        row = await self._db.run(
            lambda conn: conn.execute(
                "SELECT count(*) FROM agent_bm25_passages WHERE namespace = ?", (namespace,)
            ).fetchone()
        )
        return int(row[0])

    async def close(self) -> None:
        """Close the database connection and drop the in-memory models."""
        self._models.clear()
        await self._db.close()
