"""A deterministic embedder that needs no model and no network: hashed lexical features.

Honest about what it is: the vectors encode which words (and word pieces) a text contains,
not what it means. Texts that share vocabulary are close; paraphrases with different words
are not. It is the default so that ingestion, search and semantic memory work on a machine
with no network and no model files; switch to ``litellm`` or ``model2vec`` for meaning.

Features are lower-cased words (weight 1) and their character trigrams (weight 0.5, so
"retrieval" and "retrieve" overlap), hashed with CRC-32 into ``dimension`` signed buckets
(the hashing trick), log-scaled and L2-normalized.
"""

from __future__ import annotations

import math
import operator
import re
import zlib
from collections.abc import Sequence

from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings

_WORD = re.compile(r"\w+", re.UNICODE)
DEFAULT_DIMENSION = 384


class FeatureHashingEmbedder(IEmbedder):
    """Hashed word and trigram counts; see the module docstring for what that does and not."""

    VERSION = 1

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        if dimension < 16:
            raise UsageError("the feature-hashing embedder needs at least 16 dimensions")
        self._dimension = dimension
        self._buckets: dict[str, tuple[int, float]] = {}

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> FeatureHashingEmbedder:
        """``AGENT_EMBEDDING_DIMENSION`` buckets (384 by default)."""
        return cls(settings.embedding_dimension or DEFAULT_DIMENSION)

    @property
    def model_id(self) -> str:
        """``core-agent/feature-hashing-v1-<dimension>``."""
        return f"core-agent/feature-hashing-v{self.VERSION}-{self._dimension}"

    @property
    def dimension(self) -> int:
        """The number of hash buckets."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text (pure computation, microseconds per word)."""
        return [self.embed_one(text, position=i) for i, text in enumerate(texts)]

    def embed_one(self, text: str, *, position: int = 0) -> list[float]:
        """The vector of one text.

        Raises:
            UsageError: The text has no letters or digits.
        """
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"text {position} is empty; nothing to embed")
        counts: dict[str, float] = {}
        for word in _WORD.findall(text.lower()):
            counts[word] = counts.get(word, 0.0) + 1.0
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                gram = "#" + padded[i : i + 3]
                counts[gram] = counts.get(gram, 0.0) + 0.5
        if not counts:
            raise UsageError(f"text {position} has no letters or digits to embed")
        vector = [0.0] * self._dimension
        for feature, count in counts.items():
            index, sign = self._bucket(feature)
            vector[index] += sign * (1.0 + math.log(count)) if count >= 1 else sign * count
        norm = math.sqrt(math.fsum(map(operator.mul, vector, vector)))
        if norm == 0.0:
            # Every feature cancelled out in its bucket: vanishingly rare; fall back to one.
            index, _ = self._bucket(text)
            vector[index] = 1.0
            norm = 1.0
        return [v / norm for v in vector]

    def _bucket(self, feature: str) -> tuple[int, float]:
        cached = self._buckets.get(feature)
        if cached is None:
            digest = zlib.crc32(feature.encode("utf-8"))
            cached = (digest % self._dimension, 1.0 if digest & 0x80000000 else -1.0)
            if len(self._buckets) < 500_000:
                self._buckets[feature] = cached
        return cached
