"""Retrieval at scale: vector stores, keyword indexes, hybrid search, ingestion.

    python -m benchmarks.retrieval                 # 100k chunks, 384 dimensions
    python -m benchmarks.retrieval --chunks 20000  # quicker
    python -m benchmarks.retrieval --only text     # one part: ingestion, vectors or text

Each part runs in its own process.

* Vectors: 100k unit vectors drawn around 1,000 random centres (clustered like real
  embeddings), queries are perturbed corpus vectors. Top-10 latency for sqlite-vec, LanceDB
  without an index (exact) and with an IVF-PQ index, and recall@10 of each against exact
  cosine search in NumPy; sqlite-vec with a filter matching 1 record in 10k.
* Keyword: 100k synthetic chunks of ~80 words drawn from a Zipf vocabulary of 30k words;
  queries are 3 mid-frequency words of a random chunk. Tantivy, FTS5 and rank-bm25.
* Hybrid: HybridRetriever (sqlite-vec + the offline feature-hashing embedder, query
  embedding included, with Tantivy and with FTS5) over the same 100k chunks, embedded for real.
* Ingestion: documents of ~2k words through the whole pipeline (tiktoken chunking, the
  offline embedder, sqlite-vec, Tantivy, catalog): chunks per second and the process's peak
  resident memory after it (measured first, before the big data sets exist).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stats import summary
from core_agent.contracts.vector_store import IVectorStore, VectorRecord
from core_agent.memory.chunking import TokenChunker
from core_agent.memory.hybrid_retriever import HybridRetriever
from core_agent.memory.ingestion import IngestionPipeline
from providers.embedders.feature_hashing import FeatureHashingEmbedder
from providers.lexical.fts5_index import Fts5LexicalIndex
from providers.lexical.rank_bm25_index import RankBM25LexicalIndex
from providers.lexical.tantivy_index import TantivyLexicalIndex
from providers.loaders.text_loader import PlainTextDocumentLoader
from providers.sqlite.document_catalog import SqliteDocumentCatalog
from providers.tiktoken_token_counter import TiktokenTokenCounter
from providers.vectors.lancedb_store import LanceDBVectorStore
from providers.vectors.sqlite_vec_store import SqliteVecVectorStore

TARGETS_MS = {"sqlite_vec": 40.0, "lexical": 20.0, "hybrid": 60.0}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Corpus:
    """Deterministic synthetic text: Zipf-distributed pseudo-words."""

    def __init__(self, seed: int = 7, vocabulary: int = 30_000) -> None:
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(self.rng.choice(letters) for _ in range(self.rng.randint(3, 10))))
        self.words = sorted(words)
        self.rng.shuffle(self.words)
        self.cumulative = list(accumulate(1.0 / (rank + 1) for rank in range(vocabulary)))

    def text(self, n_words: int) -> str:
        total = self.cumulative[-1]
        picks = (
            bisect.bisect_left(self.cumulative, self.rng.random() * total) for _ in range(n_words)
        )
        return " ".join(self.words[i] for i in picks)

    def query_from(self, text: str, n: int = 3) -> str:
        # Mid-frequency words: neither stopword-like heads of the Zipf curve nor hapaxes.
        rank = {w: i for i, w in enumerate(self.words[:5000])}
        candidates = [w for w in set(text.split()) if 50 <= rank.get(w, 10**9) < 5000]
        picked = self.rng.sample(candidates, min(n, len(candidates))) or text.split()[:n]
        return " ".join(picked)


async def timed(calls: list[Callable[[], Awaitable[Any]]]) -> list[float]:
    for call in calls[:5]:
        await call()  # warm caches and connections
    samples = []
    for call in calls:
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000.0)
    return samples


async def bench_ingestion(root: Path, corpus: Corpus, documents: int) -> dict[str, Any]:
    db = root / "ingest.db"
    pipeline = IngestionPipeline(
        loaders=[PlainTextDocumentLoader()],
        chunker=TokenChunker(TiktokenTokenCounter(), 256, 32),
        embedder=FeatureHashingEmbedder(),
        vectors=SqliteVecVectorStore(db),
        lexical=TantivyLexicalIndex(root / "ingest-tantivy"),
        catalog=SqliteDocumentCatalog(db),
    )
    texts = ["\n\n".join(corpus.text(120) + "." for _ in range(16)) for _ in range(documents)]
    start = time.perf_counter()
    chunks = 0
    for i, text in enumerate(texts):
        result = await pipeline.ingest_text(text, source=f"doc{i}")
        chunks += result.chunks
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    for i, text in enumerate(texts):
        await pipeline.ingest_text(text, source=f"doc{i}")
    unchanged_ms = (time.perf_counter() - start) * 1000.0 / len(texts)
    return {
        "documents": documents,
        "chunks": chunks,
        "chunks_per_s": chunks / seconds,
        "unchanged_reingest_ms_per_doc": unchanged_ms,
        "peak_rss_mb": peak_rss_mb(),
    }


def clustered_vectors(n: int, dim: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, dim)).astype(np.float32)
    data = centres[rng.integers(0, 1000, n)] + 0.35 * rng.standard_normal((n, dim)).astype(
        np.float32
    )
    return data / np.linalg.norm(data, axis=1, keepdims=True)


async def fill(
    store: IVectorStore, namespace: str, vectors: np.ndarray, texts: list[str] | None, model: str
) -> float:
    start = time.perf_counter()
    for lo in range(0, len(vectors), 5000):
        batch = [
            VectorRecord(
                id=f"c{i:06d}",
                vector=vectors[i].tolist(),
                text=texts[i] if texts else "",
                metadata={"document_id": f"d{i // 10}", "start": 0, "end": 0},
            )
            for i in range(lo, min(lo + 5000, len(vectors)))
        ]
        await store.upsert(namespace, batch, embedding_model=model)
    return time.perf_counter() - start


def recall_at_10(found: list[list[str]], truth: list[list[str]]) -> float:
    return float(np.mean([len(set(f) & set(t)) / 10.0 for f, t in zip(found, truth, strict=True)]))


async def bench_vectors(root: Path, n: int, dim: int, queries: int) -> dict[str, Any]:
    data = clustered_vectors(n, dim)
    rng = np.random.default_rng(11)
    picks = rng.integers(0, n, queries)
    q = data[picks] + 0.1 * rng.standard_normal((queries, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    truth = [[f"c{i:06d}" for i in np.argsort(-(data @ row))[:10]] for row in q]
    out: dict[str, Any] = {"vectors": n, "dimension": dim, "queries": queries}

    async def measure(store: IVectorStore, name: str) -> None:
        found: list[list[str]] = []

        async def one(row: np.ndarray) -> None:
            hits = await store.search("bench", row.tolist(), 10, embedding_model="random")
            found.append([h.record.id for h in hits])

        samples = await timed([lambda row=row: one(row) for row in q])
        out[name] = {**summary(samples), "recall_at_10": recall_at_10(found[-queries:], truth)}

    sqlite = SqliteVecVectorStore(root / "vectors.db")
    out["sqlite_vec_build_s"] = await fill(sqlite, "bench", data, None, "random")
    # Measured on a settled database (WAL folded back), as after the background checkpoint.
    await sqlite.close()
    sqlite = SqliteVecVectorStore(root / "vectors.db")
    await measure(sqlite, "sqlite_vec")
    filtered = await timed(
        [
            lambda row=row: sqlite.search(
                "bench", row.tolist(), 10, embedding_model="random", where={"document_id": "d42"}
            )
            for row in q[:50]
        ]
    )
    out["sqlite_vec_filtered_1_in_10k"] = summary(filtered)
    await sqlite.close()

    lance = LanceDBVectorStore(root / "lancedb", nprobes=20, refine_factor=5)
    out["lancedb_build_s"] = await fill(lance, "bench", data, None, "random")
    await measure(lance, "lancedb_exact")
    start = time.perf_counter()
    await asyncio.to_thread(lance.create_index, "bench", partitions=256, sub_vectors=dim // 8)
    out["lancedb_index_build_s"] = time.perf_counter() - start
    await measure(lance, "lancedb_ivf_pq")
    await lance.close()
    return out


async def bench_text(root: Path, corpus: Corpus, n: int, queries: int) -> dict[str, Any]:
    texts = [corpus.text(80) for _ in range(n)]
    asked = [corpus.query_from(texts[corpus.rng.randrange(n)]) for _ in range(queries)]
    out: dict[str, Any] = {"chunks": n, "queries": queries, "example_query": asked[0]}
    db = root / "text.db"
    fts = Fts5LexicalIndex(db)
    start = time.perf_counter()
    for lo in range(0, n, 5000):
        await fts.add("bench", [(f"c{i:06d}", texts[i]) for i in range(lo, min(lo + 5000, n))])
    out["fts5_build_s"] = time.perf_counter() - start
    out["fts5"] = summary(await timed([lambda a=a: fts.search("bench", a, 10) for a in asked]))

    tantivy = TantivyLexicalIndex(root / "tantivy")
    start = time.perf_counter()
    for lo in range(0, n, 5000):
        await tantivy.add("bench", [(f"c{i:06d}", texts[i]) for i in range(lo, min(lo + 5000, n))])
    out["tantivy_build_s"] = time.perf_counter() - start
    out["tantivy"] = summary(
        await timed([lambda a=a: tantivy.search("bench", a, 10) for a in asked])
    )

    bm25 = RankBM25LexicalIndex(db)
    await bm25.add("bench", [(f"c{i:06d}", texts[i]) for i in range(n)])
    start = time.perf_counter()
    await bm25.search("bench", asked[0], 10)
    out["bm25_model_build_s"] = time.perf_counter() - start
    few = asked[: max(10, queries // 10)]
    out["rank_bm25"] = summary(await timed([lambda a=a: bm25.search("bench", a, 10) for a in few]))
    await bm25.close()

    embedder = FeatureHashingEmbedder()
    start = time.perf_counter()
    vectors = np.asarray(await embedder.embed(texts), dtype=np.float32)
    out["embed_chunks_per_s"] = n / (time.perf_counter() - start)
    store = SqliteVecVectorStore(db)
    await fill(store, "bench", vectors, texts, embedder.model_id)
    await store.close()
    await fts.close()
    store, fts = SqliteVecVectorStore(db), Fts5LexicalIndex(db)
    for name, lexical in (("hybrid", tantivy), ("hybrid_fts5", fts)):
        retriever = HybridRetriever(vectors=store, embedder=embedder, lexical=lexical)
        out[name] = summary(
            await timed(
                [lambda a=a, r=retriever: r.retrieve(a, 10, namespace="bench") for a in asked]
            )
        )
    await store.close()
    await fts.close()
    await tantivy.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--documents", type=int, default=60, help="for the ingestion run")
    parser.add_argument(
        "--only", choices=["ingestion", "vectors", "text"], help="run one part and print its JSON"
    )
    args = parser.parse_args()
    corpus = Corpus()
    parts: dict[str, Callable[[Path], Awaitable[dict[str, Any]]]] = {
        "ingestion": lambda root: bench_ingestion(root, corpus, args.documents),
        "vectors": lambda root: bench_vectors(root, args.chunks, args.dim, args.queries),
        "text": lambda root: bench_text(root, corpus, args.chunks, args.queries),
    }
    if args.only:
        with tempfile.TemporaryDirectory() as tmp:
            result = asyncio.run(parts[args.only](Path(tmp)))
        result["process_peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(result, indent=2))
        return
    # Each part in a fresh process: one part's heap (2 GB of NumPy ground truth and text)
    # and loaded libraries must not weigh on the next part's latencies.
    results: dict[str, Any] = {}
    for name in parts:
        flags = ["--chunks", str(args.chunks), "--dim", str(args.dim)]
        flags += ["--queries", str(args.queries), "--documents", str(args.documents)]
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.retrieval", "--only", name, *flags],
            check=True,
            capture_output=True,
            text=True,
        )
        results[name] = json.loads(done.stdout)
    results["peak_rss_mb"] = max(part["process_peak_rss_mb"] for part in results.values())
    print(json.dumps(results, indent=2))
    v, t, i = results["vectors"], results["text"], results["ingestion"]
    print(
        f"sqlite-vec top-10 over {v['vectors']:,}x{v['dimension']}: p95 "
        f"{v['sqlite_vec']['p95_ms']:.1f} ms (target < 40), recall@10 "
        f"{v['sqlite_vec']['recall_at_10']:.3f}; LanceDB exact p95 "
        f"{v['lancedb_exact']['p95_ms']:.1f} ms recall {v['lancedb_exact']['recall_at_10']:.3f}, "
        f"IVF-PQ p95 {v['lancedb_ivf_pq']['p95_ms']:.1f} ms recall "
        f"{v['lancedb_ivf_pq']['recall_at_10']:.3f}.\n"
        f"Keyword top-10 over {t['chunks']:,} chunks (target < 20): Tantivy p95 "
        f"{t['tantivy']['p95_ms']:.1f} ms, FTS5 p95 {t['fts5']['p95_ms']:.1f} ms, rank-bm25 p95 "
        f"{t['rank_bm25']['p95_ms']:.0f} ms. Hybrid p95 {t['hybrid']['p95_ms']:.1f} ms with "
        f"Tantivy, {t['hybrid_fts5']['p95_ms']:.1f} ms with FTS5 (target < 60).\n"
        f"Ingestion: {i['chunks_per_s']:.0f} chunks/s with the offline embedder; peak RSS "
        f"{i['peak_rss_mb']:.0f} MB after ingestion, {results['peak_rss_mb']:.0f} MB at most."
    )


if __name__ == "__main__":
    main()
