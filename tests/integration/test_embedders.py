"""Embedders: the offline default, litellm against a real OpenAI-protocol server, model2vec."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import ConfigurationError, ModelError, UsageError
from core_agent.contracts.settings import AgentSettings
from providers.embedders.feature_hashing import FeatureHashingEmbedder
from providers.embedders.litellm_embedder import LiteLLMEmbedder
from providers.embedders.model2vec_embedder import Model2VecEmbedder
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


async def test_feature_hashing_is_deterministic_unit_length_and_lexical() -> None:
    embedder = FeatureHashingEmbedder()
    first, again, related, unrelated = await embedder.embed(
        [
            "Hybrid retrieval fuses BM25 and vector search",
            "Hybrid retrieval fuses BM25 and vector search",
            "vector search with BM25 retrieving passages",
            "The cat sat quietly on the warm windowsill",
        ]
    )
    assert first == again
    assert len(first) == embedder.dimension == 384
    assert math.sqrt(sum(v * v for v in first)) == pytest.approx(1.0)
    assert cosine(first, related) > cosine(first, unrelated) + 0.2
    # A fresh instance (another process) gives the same vectors.
    assert (
        await FeatureHashingEmbedder().embed(["Hybrid retrieval fuses BM25 and vector search"])
    )[0] == first
    assert embedder.model_id == "core-agent/feature-hashing-v1-384"


async def test_feature_hashing_refuses_texts_with_nothing_to_embed() -> None:
    embedder = FeatureHashingEmbedder(64)
    assert embedder.model_id.endswith("-64")
    for bad in ["", "   \n", "!!! ???"]:
        with pytest.raises(UsageError, match="text 1"):
            await embedder.embed(["fine", bad])


async def test_default_embedder_needs_no_configuration(container: KernelContainer) -> None:
    embedder = container.embedder()
    assert isinstance(embedder, FeatureHashingEmbedder)


async def test_litellm_embedder_batches_through_the_openai_protocol(
    openai_server: OpenAIServer,
) -> None:
    embedder = LiteLLMEmbedder(
        "openai/test-embed",
        16,
        api_base=openai_server.base_url,
        api_key="sk-test",
        batch_size=3,
        max_retries=0,
    )
    texts = [f"passage number {i}" for i in range(7)]

    vectors = await embedder.embed(texts)

    assert [len(v) for v in vectors] == [16] * 7
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(OpenAIServer.embedding_of(text, 16), abs=1e-6)
    assert [len(r["input"]) for r in openai_server.embedding_requests] == [3, 3, 1]
    assert embedder.model_id == "openai/test-embed"


async def test_litellm_embedder_errors_are_clear(openai_server: OpenAIServer) -> None:
    embedder = LiteLLMEmbedder(
        "openai/test-embed", 8, api_base=openai_server.base_url, api_key="sk-test", max_retries=0
    )
    with pytest.raises(ModelError, match="returned 16 dimensions"):
        await embedder.embed(["hello"])
    with pytest.raises(UsageError, match="text 0 is empty"):
        await embedder.embed([" "])
    openai_server.embedding_failures.append(400)
    right = LiteLLMEmbedder(
        "openai/test-embed", 16, api_base=openai_server.base_url, api_key="sk-test", max_retries=0
    )
    with pytest.raises(ModelError) as failure:
        await right.embed(["hello"])
    assert failure.value.status_code == 400
    with pytest.raises(ConfigurationError, match="AGENT_EMBEDDING_DIMENSION"):
        LiteLLMEmbedder.from_settings(AgentSettings(embedder="litellm", embedding_model="x"))


def save_tiny_model2vec(folder: Path) -> None:
    """A real model2vec model built offline: a word-level tokenizer and random vectors."""
    from model2vec import StaticModel
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = ["[UNK]", "[PAD]", "vector", "search", "memory", "cat", "dog", "retrieval"]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(words), 12)).astype(np.float32)
    vectors[0] = 0.0
    StaticModel(vectors, tokenizer, config={"normalize": True}).save_pretrained(folder)


async def test_model2vec_loads_a_local_folder_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "tiny-model"
    save_tiny_model2vec(folder)
    embedder = Model2VecEmbedder.from_settings(
        AgentSettings(embedder="model2vec", embedding_model=str(folder))
    )

    a, b, c = await embedder.embed(["vector search", "search vector", "cat dog"])

    assert embedder.dimension == 12
    assert embedder.model_id == "model2vec:tiny-model"
    assert cosine(a, b) == pytest.approx(1.0, abs=1e-5)
    assert cosine(a, c) < 0.99
    with pytest.raises(UsageError, match="no words the model knows"):
        await embedder.embed(["zebra"])
    with pytest.raises(ConfigurationError, match="not a directory"):
        Model2VecEmbedder(tmp_path / "missing")
