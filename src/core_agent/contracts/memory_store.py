"""Port for long-term memory: facts and preferences kept across tasks."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

MemoryScope = Literal["session", "long_term"]


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered value under ``scope/namespace/key``."""

    scope: MemoryScope
    namespace: str
    key: str
    value: Any
    created_at: datetime
    updated_at: datetime
    tainted: bool = False
    """The value was written by a task with untrusted content in its context: whoever reads it
    back reads untrusted content."""


class IMemoryStore(abc.ABC):
    """Keyed memory. Writes replace the value under the same key atomically.

    Methods are awaitable; failures raise ``StorageError``.
    """

    @abc.abstractmethod
    async def put(
        self, scope: MemoryScope, namespace: str, key: str, value: Any, *, tainted: bool = False
    ) -> MemoryItem:
        """Store a JSON-serializable ``value``.

        ``tainted`` is its provenance (see ``MemoryItem.tainted``), replaced with the value.

        Raises:
            UsageError: Empty key or a value that is not JSON-serializable.
        """

    @abc.abstractmethod
    async def get(self, scope: MemoryScope, namespace: str, key: str) -> MemoryItem | None:
        """The item under the key, or ``None``."""

    @abc.abstractmethod
    async def search(
        self, scope: MemoryScope, namespace: str, query: str, limit: int = 10
    ) -> list[MemoryItem]:
        """Items whose key or value contains words of ``query`` (case-insensitive).

        Items matching more of the words come first, then the most recently updated; an
        empty query lists the most recently updated items.
        """

    @abc.abstractmethod
    async def delete(self, scope: MemoryScope, namespace: str, key: str) -> bool:
        """Remove the key; ``True`` when it existed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
