"""Long-term memory on SQLite, semantic search over it, and the tools a model uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.memory.semantic_memory import SemanticMemory
from fakes.gateways import FakeRecordingGateway
from providers.embedders.feature_hashing import FeatureHashingEmbedder
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from providers.sqlite.memory_store import SqliteMemoryStore
from providers.vectors.sqlite_vec_store import SqliteVecVectorStore
from shared.agent_protocol import TaskRequest

pytestmark = pytest.mark.anyio


async def test_sqlite_memory_store_keeps_values_by_scope_namespace_and_key(tmp_path: Path) -> None:
    store = SqliteMemoryStore(tmp_path / "db.sqlite")
    first = await store.put("long_term", "alice", "diet", {"vegetarian": True})
    second = await store.put("long_term", "alice", "diet", {"vegetarian": False})
    await store.put("session", "alice", "diet", "session only")
    await store.put("long_term", "bob", "diet", "anything")

    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    got = await store.get("long_term", "alice", "diet")
    assert got is not None and got.value == {"vegetarian": False}
    assert [i.namespace for i in await store.search("long_term", "alice", "vegetarian")] == [
        "alice"
    ]
    assert await store.search("long_term", "alice", "100%_match") == []
    assert await store.delete("long_term", "alice", "diet") is True
    assert await store.get("long_term", "alice", "diet") is None
    for bad in [
        lambda: store.put("long_term", "a", "", 1),
        lambda: store.put("forever", "a", "k", 1),
    ]:  # type: ignore[arg-type]
        with pytest.raises(UsageError):
            await bad()
    with pytest.raises(UsageError, match="JSON"):
        await store.put("long_term", "a", "k", {1, 2})
    with pytest.raises(UsageError, match="JSON"):
        await store.put("long_term", "a", "k", float("nan"))
    await store.close()

    reopened = SqliteMemoryStore(tmp_path / "db.sqlite")
    assert (await reopened.get("session", "alice", "diet")).value == "session only"  # type: ignore[union-attr]
    await reopened.close()


async def test_semantic_memory_finds_by_words_it_shares_and_rebuilds_for_a_new_embedder(
    tmp_path: Path,
) -> None:
    store = SqliteMemoryStore(tmp_path / "db.sqlite")
    vectors = SqliteVecVectorStore(tmp_path / "db.sqlite")
    memory = SemanticMemory(store, vectors, FeatureHashingEmbedder())
    await memory.put("long_term", "u/1", "editor", "The user edits code in Neovim")
    await memory.put("long_term", "u/1", "coffee", "Prefers espresso without sugar")
    await memory.put("long_term", "u/1", "city", "Lives in Lisbon")

    [first, *_] = await memory.search("long_term", "u/1", "which espresso drink?", 3)
    assert first.key == "coffee"
    assert SemanticMemory.vector_namespace("long_term", "u/1").startswith("memory.long_term.h")

    switched = SemanticMemory(store, vectors, FeatureHashingEmbedder(64))
    [again, *_] = await switched.search("long_term", "u/1", "Neovim editing", 3)
    assert again.key == "editor"
    info = await vectors.describe(SemanticMemory.vector_namespace("long_term", "u/1"))
    assert info is not None and info.dimension == 64 and info.count == 3
    assert await switched.delete("long_term", "u/1", "city") is True
    assert [i.key for i in await switched.search("long_term", "u/1", "Lisbon", 3)] != ["city"]
    await switched.close()
    await vectors.close()


async def test_the_model_remembers_in_one_task_and_the_next_task_recalls(tmp_path: Path) -> None:
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data"))
    recording = FakeRecordingGateway(
        ScriptedLLMGateway(
            conversations=[
                ScriptedConversation(
                    match="remember",
                    turns=[
                        ScriptedTurn(
                            tool_calls=[
                                ScriptedToolCall(
                                    name="remember",
                                    arguments={
                                        "key": "user.tea",
                                        "value": "The user drinks green tea",
                                    },
                                )
                            ]
                        ),
                        ScriptedTurn(content="Noted."),
                    ],
                ),
                ScriptedConversation(
                    match="drink",
                    turns=[
                        ScriptedTurn(
                            tool_calls=[ScriptedToolCall(name="recall", arguments={"query": "tea"})]
                        ),
                        ScriptedTurn(content="Green tea."),
                    ],
                ),
            ]
        )
    )
    container.llm_gateway.override(recording)
    kernel = container.kernel()
    async with kernel:
        first = await kernel.execute_task(
            TaskRequest(task="Please remember that I drink green tea")
        )
        assert first.status.value == "succeeded"
        second = await kernel.execute_task(TaskRequest(task="What do I drink in the morning?"))
        assert second.output == "Green tea."
        spans = await kernel.task_spans(second.task_id)

    recall_span = next(s for s in spans if s.name == "memory.recall")
    assert recall_span.attributes["recalled"] == ["user.tea"]
    tool_span = next(s for s in spans if s.kind == "tool" and "recall" in s.name)
    assert tool_span.status == "ok"
    # The second task's first prompt carried the memory after the system prompt.
    second_prompt = next(
        r.messages for r in recording.requests if "morning" in str(r.messages[-1].content)
    )
    assert "The user drinks green tea" in str(second_prompt[1].content)
    # The kernel closed the stores it opened; the fact is on disk for the next process.
    store = SqliteMemoryStore(tmp_path / "data" / "core_agent.db")
    item = await store.get("long_term", "default", "user.tea")
    await store.close()
    assert item is not None and json.dumps(item.value) == '"The user drinks green tea"'


async def test_the_model_searches_ingested_knowledge_and_reads_sources(tmp_path: Path) -> None:
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data"))
    await container.ingestion().ingest_text(
        "The office wifi password rotates every Monday; ask the front desk.",
        source="handbook.md",
    )
    recording = FakeRecordingGateway(
        ScriptedLLMGateway(
            [
                ScriptedTurn(
                    tool_calls=[
                        ScriptedToolCall(
                            name="knowledge_search", arguments={"query": "wifi password"}
                        )
                    ]
                ),
                ScriptedTurn(content="Ask the front desk; it rotates on Mondays."),
            ]
        )
    )
    container.llm_gateway.override(recording)
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="How do I get on the wifi?"))
    assert result.status.value == "succeeded"
    tool_result = next(m for m in recording.requests[-1].messages if m.kind == "tool")
    assert "handbook.md" in tool_result.content
    assert "untrusted-data" in tool_result.content  # stored documents are spotlighted
    hits = json.loads(
        tool_result.content[tool_result.content.index("[") : tool_result.content.rindex("]") + 1]
    )
    assert hits[0]["offsets"] == [0, 66] and set(hits[0]["scores"]) == {"lexical", "vector"}


async def test_recall_from_an_empty_namespace_embeds_nothing(tmp_path: Path) -> None:
    """A task in an app that never wrote long-term memory pays no embedding for its recall."""

    class CountingEmbedder(FeatureHashingEmbedder):
        calls = 0

        async def embed(self, texts: list[str]) -> list[list[float]]:  # type: ignore[override]
            CountingEmbedder.calls += 1
            return await super().embed(texts)

    store = SqliteMemoryStore(tmp_path / "db.sqlite")
    vectors = SqliteVecVectorStore(tmp_path / "db.sqlite")
    memory = SemanticMemory(store, vectors, CountingEmbedder())
    assert await memory.search("long_term", "u/1", "which espresso drink?", 3) == []
    assert CountingEmbedder.calls == 0
    await memory.put("long_term", "u/2", "coffee", "Prefers espresso without sugar")
    assert await memory.search("long_term", "u/1", "which espresso drink?", 3) == []
    await memory.put("long_term", "u/1", "coffee", "Prefers a strong morning drink")
    embedded = CountingEmbedder.calls
    [found] = await memory.search("long_term", "u/1", "which espresso?", 3)
    assert found.key == "coffee" and CountingEmbedder.calls == embedded + 1  # found by meaning
    await memory.close()
    await vectors.close()
