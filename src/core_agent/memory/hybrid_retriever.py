"""Hybrid retrieval: keyword and vector search fused by reciprocal rank fusion (RRF).

Each side ranks its own candidates; a passage at rank ``r`` on a side earns
``weight / (rrf_k + r)`` and the sums decide the order. RRF needs no score calibration
between BM25 and cosine similarity, which live on different scales. Every hit keeps both
sides' own scores and ranks, and its provenance (document, chunk, offsets, source) from the
vector store's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import UsageError
from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit
from core_agent.contracts.retriever import IRetriever, RetrievalHit
from core_agent.contracts.vector_store import IVectorStore, VectorHit, VectorRecord


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """How much each side counts, the RRF constant, and how deep each side looks."""

    vector: float = 1.0
    lexical: float = 1.0
    rrf_k: int = 60
    candidates: int = 50


class HybridRetriever(IRetriever):
    """Fuses an ``ILexicalIndex`` and an ``IVectorStore`` over the same chunk ids."""

    def __init__(
        self,
        *,
        vectors: IVectorStore,
        embedder: IEmbedder,
        lexical: ILexicalIndex,
        weights: FusionWeights | None = None,
    ) -> None:
        self._vectors = vectors
        self._embedder = embedder
        self._lexical = lexical
        self._weights = weights or FusionWeights()
        if self._weights.vector <= 0 and self._weights.lexical <= 0:
            raise UsageError("at least one retrieval side needs a positive weight")

    async def retrieve(
        self, query: str, k: int = 10, *, namespace: str = "default"
    ) -> list[RetrievalHit]:
        """The ``k`` best passages by fused rank (see the module docstring)."""
        if not isinstance(query, str) or not query.strip():
            raise UsageError("the query is empty")
        if k < 1:
            raise UsageError(f"k must be at least 1, got {k}")
        depth = max(k, self._weights.candidates)
        lexical: list[LexicalHit] = []
        vector: list[VectorHit] = []

        async def lexical_side() -> None:
            nonlocal lexical
            lexical = await self._lexical.search(namespace, query, depth)

        async def vector_side() -> None:
            nonlocal vector
            [embedding] = await self._embedder.embed([query])
            vector = await self._vectors.search(
                namespace, embedding, depth, embedding_model=self._embedder.model_id
            )

        try:
            async with anyio.create_task_group() as group:
                # Vector side first: its scan runs in worker threads, so a keyword side that
                # runs on the event loop overlaps it instead of delaying its start.
                if self._weights.vector > 0:
                    group.start_soon(vector_side)
                if self._weights.lexical > 0:
                    group.start_soon(lexical_side)
        except BaseExceptionGroup as failed:
            # Callers catch the kernel's errors, not a group of them: raise the first one.
            raise _first(failed) from None
        return await self._fuse(namespace, lexical, vector, k)

    async def _fuse(
        self, namespace: str, lexical: list[LexicalHit], vector: list[VectorHit], k: int
    ) -> list[RetrievalHit]:
        fused: dict[str, float] = {}
        scores: dict[str, dict[str, float]] = {}
        ranks: dict[str, dict[str, int]] = {}
        texts: dict[str, str] = {}
        records: dict[str, VectorRecord] = {}
        w = self._weights
        for rank, hit in enumerate(lexical, start=1):
            fused[hit.id] = fused.get(hit.id, 0.0) + w.lexical / (w.rrf_k + rank)
            scores.setdefault(hit.id, {})["lexical"] = hit.score
            ranks.setdefault(hit.id, {})["lexical"] = rank
            texts.setdefault(hit.id, hit.text)
        for rank, vhit in enumerate(vector, start=1):
            cid = vhit.record.id
            fused[cid] = fused.get(cid, 0.0) + w.vector / (w.rrf_k + rank)
            scores.setdefault(cid, {})["vector"] = 1.0 - vhit.distance
            ranks.setdefault(cid, {})["vector"] = rank
            records[cid] = vhit.record
        best = sorted(fused, key=lambda cid: (-fused[cid], cid))[:k]
        missing = [cid for cid in best if cid not in records]
        if missing:
            # Keyword-only hits: their provenance lives in the vector store's metadata.
            for record in await self._vectors.fetch(namespace, missing):
                records[record.id] = record
        return [
            self._hit(cid, fused[cid], scores[cid], ranks[cid], records.get(cid), texts)
            for cid in best
        ]

    @staticmethod
    def _hit(
        cid: str,
        score: float,
        side_scores: dict[str, float],
        side_ranks: dict[str, int],
        record: VectorRecord | None,
        texts: dict[str, str],
    ) -> RetrievalHit:
        meta = record.metadata if record is not None else {}
        document_id = meta.get("document_id")
        start, end, source = meta.get("start"), meta.get("end"), meta.get("source")
        return RetrievalHit(
            chunk_id=cid,
            document_id=str(document_id) if document_id is not None else cid.rsplit("#", 1)[0],
            text=record.text if record is not None else texts.get(cid, ""),
            score=score,
            start_offset=start if isinstance(start, int) else None,
            end_offset=end if isinstance(end, int) else None,
            source=str(source) if source is not None else None,
            scores=dict(side_scores),
            ranks=dict(side_ranks),
        )


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first
