"""Chinese keyword search: does a Chinese query find its document by the lexical side alone?

    python -m benchmarks.keyword_zh_eval

Twelve Chinese documents (``tests/data/documents_zh.jsonl``) and sixteen queries, each with
the document it should find (``tests/data/keyword_queries_zh.jsonl``). Printed per index:
top-1 accuracy and recall@3. Besides the shipped indexes (FTS5 and Tantivy with the words
cut by rjieba, rank-bm25), two FTS5 set-ups without a segmenter are measured, which is why
the FTS5 index pre-segments rather than using the trigram tokenizer:

* ``fts5-unicode61-unsegmented``: the index as it was before (a Chinese sentence is one
  token; the query's words are its runs of word characters);
* ``fts5-trigram``: FTS5's trigram tokenizer, queried with every three-character window of
  the query (OR); a query or word of fewer than three characters matches nothing there.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path

from core_agent.contracts.lexical_index import ILexicalIndex
from providers.lexical.fts5_index import Fts5LexicalIndex
from providers.lexical.rank_bm25_index import RankBM25LexicalIndex
from providers.lexical.tantivy_index import TantivyLexicalIndex
from providers.sqlite.database import sqlite_driver

DATA = Path(__file__).parents[1] / "tests" / "data"


def load(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def score(ranked: list[list[str]], expected: list[str]) -> dict[str, float]:
    top1 = sum(bool(r) and r[0] == e for r, e in zip(ranked, expected, strict=True))
    at3 = sum(e in r[:3] for r, e in zip(ranked, expected, strict=True))
    return {"top1": top1 / len(expected), "recall_at_3": at3 / len(expected)}


async def shipped(index: ILexicalIndex, docs: list[dict[str, str]], queries: list[str]):
    await index.add("zh", [(d["id"], d["text"]) for d in docs])
    ranked = [[h.id for h in await index.search("zh", q, 3)] for q in queries]
    await index.close()
    return ranked


def bare_fts5(root: Path, tokenizer: str, docs, queries, words) -> list[list[str]]:
    conn = sqlite_driver().connect(str(root / f"{tokenizer.split()[0]}.db"))
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, text, tokenize='{tokenizer}')")
    conn.executemany("INSERT INTO t (id, text) VALUES (?, ?)", [(d["id"], d["text"]) for d in docs])
    ranked = []
    for query in queries:
        terms = [w for w in words(query) if w]
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in terms) or '""'
        rows = conn.execute(
            "SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 3", (match,)
        ).fetchall()
        ranked.append([row[0] for row in rows])
    conn.close()
    return ranked


async def main() -> None:
    docs = load("documents_zh.jsonl")
    rows = load("keyword_queries_zh.jsonl")
    queries = [r["query"] for r in rows]
    expected = [r["expected"] for r in rows]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results["fts5"] = await shipped(Fts5LexicalIndex(root / "k.db"), docs, queries)
        results["tantivy"] = await shipped(TantivyLexicalIndex(root / "tantivy"), docs, queries)
        results["bm25"] = await shipped(RankBM25LexicalIndex(root / "k.db"), docs, queries)
        results["fts5-unicode61-unsegmented"] = bare_fts5(
            root,
            "porter unicode61 remove_diacritics 2",
            docs,
            queries,
            lambda q: re.findall(r"\w+", q.lower()),
        )
        results["fts5-trigram"] = bare_fts5(
            root,
            "trigram",
            docs,
            queries,
            lambda q: [q[i : i + 3] for i in range(len(q) - 2)],
        )
    figures = {name: score(ranked, expected) for name, ranked in results.items()}
    print(json.dumps({"benchmark": "keyword_zh_eval", "queries": len(rows), **figures}))
    for name, f in figures.items():
        print(f"{name:>28}: top-1 {f['top1']:.0%}, recall@3 {f['recall_at_3']:.0%}")


if __name__ == "__main__":
    asyncio.run(main())
