"""Port for turning text into vectors."""

from __future__ import annotations

import abc
from collections.abc import Sequence


class IEmbedder(abc.ABC):
    """Embeds texts with one fixed model and dimension."""

    @property
    @abc.abstractmethod
    def model_id(self) -> str:
        """Identity of the embedding model; collections record it and refuse others."""

    @property
    @abc.abstractmethod
    def dimension(self) -> int:
        """Length of every vector this embedder returns."""

    @abc.abstractmethod
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order.

        Raises:
            UsageError: A text is empty.
            ModelError: A remote embedding call failed.
        """
