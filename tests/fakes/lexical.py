"""A keyword index double that delegates to a real one, counting writes and failing on cue."""

from __future__ import annotations

from collections.abc import Sequence

from core_agent.contracts.errors import StorageError
from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit


class FakeFlakyLexicalIndex(ILexicalIndex):
    def __init__(self, inner: ILexicalIndex, *, fail_adds: int = 0) -> None:
        self.inner = inner
        self.fail_adds = fail_adds
        self.adds: list[int] = []

    async def add(self, namespace: str, passages: Sequence[tuple[str, str]]) -> None:
        if self.fail_adds:
            self.fail_adds -= 1
            raise StorageError("keyword index unavailable (injected)")
        self.adds.append(len(passages))
        await self.inner.add(namespace, passages)

    async def search(self, namespace: str, query: str, k: int) -> list[LexicalHit]:
        return await self.inner.search(namespace, query, k)

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        return await self.inner.delete(namespace, ids)

    async def count(self, namespace: str) -> int:
        return await self.inner.count(namespace)

    async def close(self) -> None:
        await self.inner.close()
