"""``IEmbedder`` over any embedding API litellm reaches (OpenAI, Ollama, vLLM, ...)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import ConfigurationError, ModelError, UsageError
from core_agent.contracts.settings import AgentSettings
from providers.litellm_gateway import load_litellm, map_litellm_error

EMBEDDING_CONFIGURATION_HELP = """The litellm embedder needs a model and its vector length:
  AGENT_EMBEDDING_MODEL=openai/text-embedding-3-small AGENT_EMBEDDING_DIMENSION=1536
  AGENT_EMBEDDING_MODEL=ollama/nomic-embed-text AGENT_EMBEDDING_DIMENSION=768
  AGENT_EMBEDDING_MODEL=openai/<name> AGENT_EMBEDDING_API_BASE=http://localhost:8080/v1 ...
Or use AGENT_EMBEDDER=hashing (offline, lexical) or AGENT_EMBEDDER=model2vec."""


class LiteLLMEmbedder(IEmbedder):
    """Embeds in batches through ``litellm.aembedding``; vendor errors become ``ModelError``."""

    def __init__(
        self,
        model: str,
        dimension: int,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout_s: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if not model or dimension < 1 or batch_size < 1:
            raise ConfigurationError(EMBEDDING_CONFIGURATION_HELP)
        self._model = model
        self._dimension = dimension
        self._api_base = api_base
        self._api_key = api_key
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._max_retries = max_retries

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> LiteLLMEmbedder:
        """From ``AGENT_EMBEDDING_*`` (the key and base fall back to ``AGENT_MODEL_*``)."""
        if not settings.embedding_model or not settings.embedding_dimension:
            raise ConfigurationError(EMBEDDING_CONFIGURATION_HELP)
        key = settings.embedding_api_key or settings.model_api_key
        return cls(
            settings.embedding_model,
            settings.embedding_dimension,
            api_base=settings.embedding_api_base or settings.model_api_base,
            api_key=key.get_secret_value() if key else None,
            batch_size=settings.embedding_batch_size,
            timeout_s=settings.model_timeout_s,
            max_retries=settings.model_max_retries,
        )

    @property
    def model_id(self) -> str:
        """The litellm model string."""
        return self._model

    @property
    def dimension(self) -> int:
        """The configured vector length; answers of another length are refused."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, ``batch_size`` texts per request."""
        for position, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise UsageError(f"text {position} is empty; nothing to embed")
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(await self._batch(list(texts[start : start + self._batch_size])))
        return vectors

    async def _batch(self, batch: list[str]) -> list[list[float]]:
        litellm = load_litellm()
        arguments: dict[str, Any] = {
            "model": self._model,
            "input": batch,
            "timeout": self._timeout_s,
            "num_retries": self._max_retries,
        }
        if self._api_base:
            arguments["api_base"] = self._api_base
        if self._api_key:
            arguments["api_key"] = self._api_key
        try:
            response = await litellm.aembedding(**arguments)
        except Exception as exc:
            raise map_litellm_error(litellm, exc) from exc
        data = sorted(response.data, key=lambda item: _field(item, "index"))
        if len(data) != len(batch):
            raise ModelError(
                f"embedding model {self._model!r} returned {len(data)} vectors for "
                f"{len(batch)} texts"
            )
        vectors = [[float(v) for v in _field(item, "embedding")] for item in data]
        for vector in vectors:
            if len(vector) != self._dimension:
                raise ModelError(
                    f"embedding model {self._model!r} returned {len(vector)} dimensions; "
                    f"AGENT_EMBEDDING_DIMENSION says {self._dimension}"
                )
            if not all(math.isfinite(v) for v in vector):
                raise ModelError(f"embedding model {self._model!r} returned non-finite values")
        return vectors


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)
