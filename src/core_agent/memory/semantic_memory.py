"""Semantic long-term memory: an ``IMemoryStore`` whose search also goes by meaning.

Items live in the wrapped store (the record of truth, ``agent_memories`` on SQLite); each
one is also embedded as ``"key: value"`` into a vector namespace of its own
(``memory.<scope>.<namespace>``). ``search`` puts the vector neighbours first and keyword
matches after them. The vectors can always be rebuilt from the store: when the embedder
changes, the namespace is re-embedded instead of refusing to remember.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import EmbeddingMismatchError
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem, MemoryScope
from core_agent.contracts.vector_store import IVectorStore, VectorRecord

_SAFE = re.compile(r"[A-Za-z0-9_.:-]{1,80}")
REINDEX_LIMIT = 100_000


def memory_text(key: str, value: Any) -> str:
    """What gets embedded for an item."""
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"{key}: {shown}"


class SemanticMemory(IMemoryStore):
    """Wraps an ``IMemoryStore`` with vector search (see the module docstring)."""

    def __init__(self, store: IMemoryStore, vectors: IVectorStore, embedder: IEmbedder) -> None:
        self._store = store
        self._vectors = vectors
        self._embedder = embedder

    @staticmethod
    def vector_namespace(scope: MemoryScope, namespace: str) -> str:
        """The vector namespace holding a memory namespace's embeddings."""
        name = (
            namespace
            if _SAFE.fullmatch(namespace)
            else ("h" + hashlib.sha256(namespace.encode()).hexdigest()[:24])
        )
        return f"memory.{scope}.{name}"

    async def put(
        self, scope: MemoryScope, namespace: str, key: str, value: Any, *, tainted: bool = False
    ) -> MemoryItem:
        """Store, then embed; the store's copy is written even if embedding fails."""
        item = await self._store.put(scope, namespace, key, value, tainted=tainted)
        await self._index([item])
        return item

    async def _index(self, items: list[MemoryItem]) -> None:
        if not items:
            return
        target = self.vector_namespace(items[0].scope, items[0].namespace)
        texts = [memory_text(item.key, item.value) for item in items]
        vectors = await self._embedder.embed(texts)
        records = [
            VectorRecord(id=item.key, vector=vector, text=text)
            for item, vector, text in zip(items, vectors, texts, strict=True)
        ]
        try:
            await self._vectors.upsert(target, records, embedding_model=self._embedder.model_id)
        except EmbeddingMismatchError:
            await self.reindex(items[0].scope, items[0].namespace)

    async def reindex(self, scope: MemoryScope, namespace: str) -> int:
        """Rebuild a namespace's vectors from the store with the current embedder."""
        target = self.vector_namespace(scope, namespace)
        await self._vectors.drop(target)
        items = await self._store.search(scope, namespace, "", limit=REINDEX_LIMIT)
        for start in range(0, len(items), 256):
            batch = items[start : start + 256]
            texts = [memory_text(item.key, item.value) for item in batch]
            vectors = await self._embedder.embed(texts)
            await self._vectors.upsert(
                target,
                [
                    VectorRecord(id=item.key, vector=vector, text=text)
                    for item, vector, text in zip(batch, vectors, texts, strict=True)
                ],
                embedding_model=self._embedder.model_id,
            )
        return len(items)

    async def get(self, scope: MemoryScope, namespace: str, key: str) -> MemoryItem | None:
        """The stored item."""
        return await self._store.get(scope, namespace, key)

    async def search(
        self, scope: MemoryScope, namespace: str, query: str, limit: int = 10
    ) -> list[MemoryItem]:
        """Nearest items by meaning, then keyword matches; the latest items for no query."""
        keyword = await self._store.search(scope, namespace, query, limit)
        if not query.strip() or not any(ch.isalnum() for ch in query):
            return keyword
        if not keyword and not await self._store.search(scope, namespace, "", 1):
            # Nothing stored here: no hit could be returned (the store has the last word on
            # every vector hit), so the query is not embedded. A new app's first tasks, and
            # every task of an app that never writes long-term memory, skip that cost.
            return []
        target = self.vector_namespace(scope, namespace)
        [vector] = await self._embedder.embed([query])
        try:
            hits = await self._vectors.search(
                target, vector, limit, embedding_model=self._embedder.model_id
            )
        except EmbeddingMismatchError:
            await self.reindex(scope, namespace)
            hits = await self._vectors.search(
                target, vector, limit, embedding_model=self._embedder.model_id
            )
        found: dict[str, MemoryItem] = {}
        for hit in hits:
            item = await self._store.get(scope, namespace, hit.record.id)
            if item is not None:
                found[item.key] = item
        for item in keyword:
            found.setdefault(item.key, item)
        return list(found.values())[:limit]

    async def delete(self, scope: MemoryScope, namespace: str, key: str) -> bool:
        """Remove the item and its vector."""
        existed = await self._store.delete(scope, namespace, key)
        await self._vectors.delete(self.vector_namespace(scope, namespace), [key])
        return existed

    async def close(self) -> None:
        """Close the wrapped store (the vector store is closed by its owner)."""
        await self._store.close()
