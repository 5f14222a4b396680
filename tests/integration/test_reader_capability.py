"""The reader end to end, on real SQLite: its library, its tools in a task, the approval its
rule asks for before a highlight is saved, and its articles in the kernel's retrieval."""

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from business_adapters.reader import ReaderCapability, ReaderLibrary
from core_agent.container import KernelContainer
from core_agent.contracts.errors import ConfigurationError, StorageError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.memory.ingestion import IngestionPipeline
from fakes.gateways import FakeRecordingGateway
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from providers.sqlite.database import sqlite_driver
from shared.agent_protocol import (
    ApprovalDecision,
    ChatMessage,
    TaskRequest,
    TaskStatus,
    ToolMessage,
    UserMessage,
)
from support.capability_entry_points import install_capabilities

pytestmark = pytest.mark.anyio

SENTENCE = "这种方法把逻辑错误率降低了一个数量级。"
QUANTUM = (
    "上个月，研究团队公布了一种新的量子纠错方案。"
    f"{SENTENCE}"
    "不过，要造出实用的量子计算机，还需要数百万个物理比特。"
)
GARDEN = "Plant tomatoes after the last frost. Water them deeply once a week."
Model = Callable[[Sequence[ChatMessage]], ScriptedTurn]


def call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


def data_of(message: ToolMessage) -> object:
    """The JSON a tool returned, out of the untrusted-data block the model sees it in."""
    body = re.search(r"<untrusted-data[^>]*>\n(.*)\n</untrusted-data>", message.content, re.S)
    assert body is not None, message.content
    return json.loads(body.group(1))


def sentence_about(text: str, word: str) -> str:
    return next(s for s in re.findall(r"[^。]*。", text) if word in s)


@pytest.fixture
def reader_settings(monkeypatch, tmp_path: Path) -> AgentSettings:
    install_capabilities(monkeypatch, tmp_path / "site")
    monkeypatch.setenv("READER_LIBRARY_PATH", str(tmp_path / "app" / "library.db"))
    return AgentSettings(data_dir=tmp_path / "data", capabilities=("reader",), recovery="off")


@pytest.fixture
def library(tmp_path: Path) -> ReaderLibrary:
    library = ReaderLibrary(tmp_path / "app" / "library.db")
    library.add_article("量子计算的新进展", QUANTUM, url="https://example.org/quantum")
    library.add_article("Spring gardening", GARDEN, author="A. Gardener")
    yield library
    library.close()


def kernel_with(settings: AgentSettings, model: Model) -> tuple[AgentKernel, FakeRecordingGateway]:
    container = KernelContainer()
    container.settings.override(settings)
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=model))
    container.llm_gateway.override(gateway)
    return container.kernel(), gateway


def test_the_library_searches_chinese_and_english_as_substrings(library: ReaderLibrary) -> None:
    def ids(query: str) -> list[int]:
        return [hit.id for hit in library.search(query)]

    assert ids("量子") == [1]  # two characters: below a trigram, matched with LIKE
    assert ids("量子纠错") == [1]  # the trigram index
    assert ids("纠错 数量级") == [1]  # every term must match
    assert ids("纠错 tomatoes") == []
    assert ids("TOMATOES frost") == [2]
    assert "降低了一个数量级" in library.search("数量级")[0].snippet
    with pytest.raises(UsageError, match="no words"):
        library.search(" ，。 ")


def test_a_bad_reader_setting_is_a_configuration_error(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("READER_CONTEXT_CHARS", "five")
    with pytest.raises(ConfigurationError, match="READER_"):
        ReaderCapability.from_settings(AgentSettings(data_dir=tmp_path))


def test_the_schema_is_created_once_and_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "library.db"
    first = ReaderLibrary(path)
    article = first.add_article("标题", "正文内容。")
    first.close()
    again = ReaderLibrary(path)
    assert again.get_article(article.id).body == "正文内容。"
    again.close()


def test_a_library_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "library.db"
    ReaderLibrary(path).add_article("t", "b")
    with sqlite_driver().connect(str(path)) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(UsageError, match="schema version 99"):
        ReaderLibrary(path).get_article(1)


def test_a_library_that_is_not_a_database_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "library.db"
    path.write_text("not sqlite at all" * 100)
    with pytest.raises(StorageError, match=str(path)):
        ReaderLibrary(path).search("x")


def test_a_highlight_must_quote_the_article_and_saves_once_per_request(
    library: ReaderLibrary,
) -> None:
    with pytest.raises(UsageError, match="not in article 1"):
        library.save_highlight(1, "文章里没有这句话。")
    first, created = library.save_highlight(1, SENTENCE, request_key="call-1")
    again, created_again = library.save_highlight(1, SENTENCE, request_key="call-1")
    assert created and not created_again and again == first
    assert [h.quote for h in library.highlights(1)] == [SENTENCE]


async def test_a_question_about_a_chinese_article_is_answered_from_its_text(
    reader_settings: AgentSettings, library: ReaderLibrary
) -> None:
    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return call("search_articles", query="量子 纠错")
        assert isinstance(last, ToolMessage)
        if last.name == "search_articles":
            hits = data_of(last)
            return call("get_article", article_id=hits[0]["id"])  # type: ignore[index]
        article = data_of(last)
        quoted = sentence_about(article["text"], "错误率")  # type: ignore[index]
        return ScriptedTurn(content=f"《{article['title']}》里写道：{quoted}")  # type: ignore[index]

    kernel, gateway = kernel_with(reader_settings, model)
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(task="我保存的那篇量子纠错的文章说错误率降低了多少？", force_mode="react")
        )
        events = await kernel.task_events(result.task_id)

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert SENTENCE in result.output and "量子计算的新进展" in result.output
    read = [e for e in events if e.kind == "tool.completed" and e.result.name == "get_article"]
    assert len(read) == 1 and SENTENCE in read[0].result.content
    # The reader's instructions followed the system prompt.
    assert "search_articles" in gateway.requests[0].messages[0].content


async def test_the_article_the_user_is_reading_is_the_tasks_context(
    reader_settings: AgentSettings, library: ReaderLibrary
) -> None:
    library.save_highlight(1, SENTENCE)
    library.set_reading_now(1)
    kernel, gateway = kernel_with(reader_settings, lambda _: ScriptedTurn(content="好的"))
    async with kernel:
        await kernel.execute_task(TaskRequest(task="总结这篇文章", force_mode="react"))
        by_metadata = await kernel.execute_task(
            TaskRequest(task="Summarize it", metadata={"reader.article_id": 2}, force_mode="react")
        )
        tainted = (await kernel.get_task(by_metadata.task_id)).tainted

    now_reading = gateway.requests[0].messages[1].content
    assert '<untrusted-data source="capability:reader">' in now_reading
    assert "The user is reading article 1 now: 量子计算的新进展" in now_reading
    assert f"- {SENTENCE}" in now_reading  # their highlight
    assert QUANTUM in now_reading
    assert GARDEN in gateway.requests[1].messages[1].content  # the request's metadata wins
    assert tainted


async def test_saving_a_highlight_waits_for_approval_and_saves_once(
    reader_settings: AgentSettings, library: ReaderLibrary
) -> None:
    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        if isinstance(messages[-1], UserMessage):
            return call("save_highlight", article_id=1, quote=SENTENCE, note="关键数字")
        return ScriptedTurn(content="已保存这条划线。")

    kernel, _ = kernel_with(reader_settings, model)
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(task="把这句划线保存下来", force_mode="react")
        )
        pending = await kernel.pending_approvals()
    assert result.status is TaskStatus.WAITING_APPROVAL
    assert [p.rule for p in pending] == ["reader:save-highlight-needs-approval"]
    assert library.highlights() == []  # nothing saved while it waits

    # Approved from a new kernel, as after the app restarted.
    kernel, _ = kernel_with(reader_settings, model)
    async with kernel:
        done = await kernel.resolve_approval(
            pending[0].request_id,
            ApprovalDecision(request_id=pending[0].request_id, approved=True),
        )
    assert done.status is TaskStatus.SUCCEEDED, done.error
    saved = library.highlights()
    assert [(h.article_id, h.quote, h.note) for h in saved] == [(1, SENTENCE, "关键数字")]


async def test_a_denied_highlight_is_not_saved(
    reader_settings: AgentSettings, library: ReaderLibrary
) -> None:
    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        if isinstance(messages[-1], UserMessage):
            return call("save_highlight", article_id=1, quote=SENTENCE)
        return ScriptedTurn(content="好的，没有保存。")

    kernel, _ = kernel_with(reader_settings, model)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="保存划线", force_mode="react"))
        request_id = result.pending_approval
        assert request_id is not None
        done = await kernel.resolve_approval(
            request_id, ApprovalDecision(request_id=request_id, approved=False, reason="不要")
        )
    assert done.status is TaskStatus.SUCCEEDED
    assert library.highlights() == []


def ingestion_of(
    settings: AgentSettings,
) -> tuple[KernelContainer, ReaderCapability, IngestionPipeline]:
    """The container (close its stores), the reader it enabled and the ingestion pipeline."""
    container = KernelContainer()
    container.settings.override(settings)
    (reader,) = container.capabilities()
    assert isinstance(reader, ReaderCapability)
    return container, reader, container.ingestion()


async def test_articles_are_ingested_and_found_by_knowledge_search(
    reader_settings: AgentSettings, library: ReaderLibrary
) -> None:
    container, reader, pipeline = ingestion_of(reader_settings)
    first = await pipeline.ingest_capability(reader)
    again = await pipeline.ingest_capability(reader)
    await container.opened().close()
    assert sorted(r.status for r in first) == ["ingested", "ingested"]
    assert sorted(r.status for r in again) == ["unchanged", "unchanged"]
    assert "capability:reader:article/1" in {r.document_id for r in first}

    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return call("knowledge_search", query="量子纠错 错误率", k=3)
        hits = data_of(last)
        top = hits[0]  # type: ignore[index]
        return ScriptedTurn(content=f"{sentence_about(top['text'], '错误率')}（{top['source']}）")

    kernel, _ = kernel_with(reader_settings, model)
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(task="量子纠错把错误率降低了多少？", force_mode="react")
        )
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert SENTENCE in result.output and "https://example.org/quantum" in result.output


async def test_an_article_removed_from_the_library_leaves_the_index(
    reader_settings: AgentSettings, library: ReaderLibrary
) -> None:
    container, reader, pipeline = ingestion_of(reader_settings)
    await pipeline.ingest_capability(reader)
    library.remove_article(1)
    synced = await pipeline.ingest_capability(reader)
    hits = await container.retriever().retrieve("量子纠错", 5, namespace="default")
    await container.opened().close()
    await reader.close()
    assert {(r.document_id, r.status) for r in synced} == {
        ("capability:reader:article/2", "unchanged"),
        ("capability:reader:article/1", "removed"),
    }
    assert all(hit.document_id != "capability:reader:article/1" for hit in hits)
