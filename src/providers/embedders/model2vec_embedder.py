"""``IEmbedder`` on a local model2vec static model: real semantic vectors, no network.

model2vec (MinishLab) distils a sentence transformer into a static token-embedding table, so
a model is a few megabytes and embeds thousands of texts per second on a CPU. Nothing is
downloaded at run time: point ``AGENT_EMBEDDING_MODEL`` at a folder saved with
``StaticModel.save_pretrained`` (or downloaded once, e.g. ``minishlab/potion-base-8M``).
Install with ``pip install 'core-agent[local-embeddings]'``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import ConfigurationError, UsageError
from core_agent.contracts.settings import AgentSettings


class Model2VecEmbedder(IEmbedder):
    """Embeds with a model2vec ``StaticModel`` loaded from a local folder."""

    def __init__(self, folder: Path) -> None:
        if not folder.is_dir():
            raise ConfigurationError(
                f"model2vec needs a downloaded model folder; {folder} is not a directory. "
                "Save one with StaticModel.save_pretrained(folder) on a machine with network."
            )
        try:
            from model2vec import StaticModel
        except ImportError as exc:
            raise ConfigurationError(
                "the model2vec embedder needs: pip install 'core-agent[local-embeddings]'"
            ) from exc
        # A folder is read as is; never ask the hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            self._model: Any = StaticModel.from_pretrained(folder, force_download=False)
        except Exception as exc:  # model2vec raises plain OSError/ValueError/KeyError
            raise ConfigurationError(f"cannot load the model2vec model in {folder}: {exc}") from exc
        self._folder = folder
        self._dimension = int(self._model.dim)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> Model2VecEmbedder:
        """The model in the folder ``AGENT_EMBEDDING_MODEL`` names."""
        if not settings.embedding_model:
            raise ConfigurationError(
                "AGENT_EMBEDDER=model2vec needs AGENT_EMBEDDING_MODEL=<folder of a saved model>"
            )
        return cls(Path(settings.embedding_model).expanduser())

    @property
    def model_id(self) -> str:
        """``model2vec:<folder name>``."""
        return f"model2vec:{self._folder.resolve().name}"

    @property
    def dimension(self) -> int:
        """The model's embedding size."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, computed in a worker thread."""
        batch = list(texts)
        for position, text in enumerate(batch):
            if not isinstance(text, str) or not text.strip():
                raise UsageError(f"text {position} is empty; nothing to embed")
        if not batch:
            return []
        matrix = await anyio.to_thread.run_sync(
            lambda: self._model.encode(batch, use_multiprocessing=False)
        )
        vectors = [[float(v) for v in row] for row in matrix]
        for position, vector in enumerate(vectors):
            if not any(vector) or not all(math.isfinite(v) for v in vector):
                # Every token of the text is unknown to the model.
                raise UsageError(f"text {position} has no words the model knows")
        return vectors
