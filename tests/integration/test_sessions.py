"""Session lifecycle, one task at a time, compaction failures and taint: real SQLite stores.

The model is the scripted one (a policy over the request); the tests look at what a host
sees: results, errors, transcripts, spans, and what the model was sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import pytest

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.errors import (
    CorruptSessionError,
    ModelError,
    SessionBusyError,
    SessionClosedError,
    SessionNotFoundError,
    TaskNotFoundError,
    UsageError,
)
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMStreamItem
from core_agent.contracts.settings import AgentSettings
from core_agent.memory.session_history import OMITTED_TURNS_NOTE, SUMMARY_HEADER
from core_agent.tooling.registry import ToolRegistry
from fakes.gateways import FakeRecordingGateway
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from providers.sqlite.database import sqlite_driver
from providers.sqlite.migrations import MIGRATIONS, _sessions_as_conversations, _statements
from shared.agent_protocol import ChatMessage, TaskRequest, TaskStatus, UserMessage

pytestmark = pytest.mark.anyio


def answer(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    """Answers the last user message by repeating it; summaries are recognised and fail."""
    task = next(m.content for m in reversed(messages) if isinstance(m, UserMessage))
    if task.startswith("Previous summary:"):
        return ScriptedTurn(error=ScriptedError(message="summaries are down", status_code=400))
    return ScriptedTurn(content=f"answered: {task}")


@tool(capabilities=["read"])
def fetch_note() -> str:
    """Read the note someone left (outside content)."""
    return "the note says: buy milk"


def kernel_on(settings: AgentSettings, gateway: ILLMGateway):  # type: ignore[no-untyped-def]
    container = KernelContainer()
    container.settings.override(settings)
    container.llm_gateway.override(gateway)
    container.tool_registry.override(ToolRegistry([fetch_note]))
    return container.kernel()


def request(task: str, session_id: str) -> TaskRequest:
    return TaskRequest(task=task, session_id=session_id, force_mode="react")


async def test_a_session_is_created_listed_shown_closed_and_deleted(settings) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        session = await kernel.create_session(user_id="ada", metadata={"book": "Emma"})
        other = await kernel.create_session(user_id="bob", session_id="bobs")
        with pytest.raises(UsageError):
            await kernel.create_session(session_id="bobs")
        first = await kernel.execute_task(request("hello", session.session_id))
        await kernel.execute_task(request("and again", session.session_id))

        assert [s.session_id for s in await kernel.list_sessions(user_id="ada")] == [
            session.session_id
        ]
        listed = await kernel.list_sessions()
        assert [s.session_id for s in listed] == [session.session_id, other.session_id]
        assert listed[0].task_count == 2 and listed[0].metadata == {"book": "Emma"}

        transcript = await kernel.session_transcript(session.session_id)
        assert [(e.seq, e.message.kind, e.message.content) for e in transcript.entries] == [
            (1, "user", "hello"),
            (2, "assistant", "answered: hello"),
            (3, "user", "and again"),
            (4, "assistant", "answered: and again"),
        ]
        assert transcript.entries[0].task_id == first.task_id

        closed = await kernel.close_session(session.session_id)
        assert closed.closed_at is not None
        with pytest.raises(SessionClosedError):
            await kernel.execute_task(request("once more", session.session_id))
        assert (await kernel.get_session(session.session_id)).task_count == 2  # none created

        deleted = await kernel.delete_session(session.session_id)
        assert (deleted.tasks, deleted.entries, deleted.summaries) == (2, 4, 0)
        with pytest.raises(SessionNotFoundError):
            await kernel.session_transcript(session.session_id)
        with pytest.raises(TaskNotFoundError):
            await kernel.get_task(first.task_id)
        assert await kernel.task_spans(first.task_id) == []
        assert [s.session_id for s in await kernel.list_sessions()] == ["bobs"]
    conn = sqlite_driver().connect(str(settings.database_path))
    for table in ("agent_task_events", "agent_traces", "agent_checkpoints", "agent_task_messages"):
        count = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE task_id = ?", (first.task_id,))
        assert count.fetchone() == (0,), table
    conn.close()


class HeldGateway(ILLMGateway):
    """Holds every call until ``release`` is set, then answers like ``answer``."""

    def __init__(self) -> None:
        self.inner = ScriptedLLMGateway(policy=answer)
        self.entered = anyio.Event()
        self.release = anyio.Event()

    @property
    def model_name(self) -> str:
        return "held/test"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.entered.set()
        await self.release.wait()
        return await self.inner.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        self.entered.set()
        await self.release.wait()
        async for item in self.inner.stream(request):
            yield item


async def test_a_session_runs_one_task_at_a_time_across_kernels_on_one_database(
    settings,
) -> None:
    held = HeldGateway()
    async with (
        kernel_on(settings, held) as first,
        kernel_on(settings, ScriptedLLMGateway(policy=answer)) as second,
    ):
        session = await first.create_session(user_id="ada")
        results = []

        async def run_first() -> None:
            results.append(await first.execute_task(request("slow one", session.session_id)))

        async with anyio.create_task_group() as group:
            group.start_soon(run_first)
            await held.entered.wait()  # the first task is running, in the model call
            with pytest.raises(SessionBusyError) as busy:
                await second.execute_task(request("too early", session.session_id))
            assert busy.value.status == "running" and "core-agent cancel" in str(busy.value)
            with pytest.raises(SessionBusyError):
                await second.delete_session(session.session_id)
            held.release.set()
        assert results[0].status is TaskStatus.SUCCEEDED
        later = await second.execute_task(request("now", session.session_id))
        assert later.status is TaskStatus.SUCCEEDED
        tasks = await second.list_tasks(session_id=session.session_id)
        assert [t.request.task for t in tasks] == ["now", "slow one"]  # "too early" never ran

        # Two submissions at the same moment: exactly one gets in.
        outcomes: list[str] = []

        async def submit(kernel, text: str) -> None:  # type: ignore[no-untyped-def]
            try:
                await kernel.execute_task(request(text, session.session_id))
                outcomes.append("ran")
            except SessionBusyError:
                outcomes.append("busy")

        held.release = anyio.Event()
        held.entered = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(submit, first, "racer one")
            group.start_soon(submit, second, "racer two")
            await held.entered.wait()
            await anyio.sleep(0.05)
            held.release.set()
        assert sorted(outcomes) == ["busy", "ran"]


async def test_a_failed_summary_leaves_the_oldest_turns_out_and_the_task_succeeds(
    tmp_path,
) -> None:
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        session_window_tokens=300,
        session_summary_tokens=32,
        memory_recall_k=0,
    )
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer))
    async with kernel_on(settings, gateway) as kernel:
        session = await kernel.create_session()
        for n in range(12):
            result = await kernel.execute_task(
                TaskRequest(
                    task=f"tell me about item {n} in a sentence or two please",
                    session_id=session.session_id,
                    tools=(),
                    force_mode="react",
                )
            )
            assert result.status is TaskStatus.SUCCEEDED, result.error
        spans = await kernel.task_spans(result.task_id)
        transcript = await kernel.session_transcript(session.session_id)

    (compaction,) = [s for s in spans if s.name == "memory.compaction"]
    assert compaction.status == "error" and "summaries are down" in (compaction.error or "")
    assert compaction.attributes["fallback"]
    assert transcript.summaries == [] and len(transcript.entries) == 24  # nothing lost
    last = gateway.requests[-1].messages
    note = next(m.content for m in last if "left out" in (m.content or ""))
    assert note == OMITTED_TURNS_NOTE.format(count=compaction.attributes["folded_turns"])
    assert not any(SUMMARY_HEADER in (m.content or "") for m in last)
    assert "item 0 " not in "".join(m.content or "" for m in last)
    assert last[-1] == UserMessage(content="tell me about item 11 in a sentence or two please")


async def test_history_from_a_tainted_task_taints_the_next_task(settings) -> None:
    def policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        from providers.scripted_gateway import ScriptedToolCall
        from shared.agent_protocol import ToolMessage

        last = messages[-1]
        if isinstance(last, ToolMessage):
            return ScriptedTurn(content=f"The note: {last.content}")
        if isinstance(last, UserMessage) and "note" in last.content:
            return ScriptedTurn(tool_calls=[ScriptedToolCall(name="fetch_note", arguments={})])
        return ScriptedTurn(content="ok")

    async with kernel_on(settings, ScriptedLLMGateway(policy=policy)) as kernel:
        session = await kernel.create_session()
        first = await kernel.execute_task(request("read the note", session.session_id))
        second = await kernel.execute_task(request("thanks", session.session_id))
        fresh = await kernel.execute_task(TaskRequest(task="thanks", force_mode="react"))
        events = await kernel.task_events(second.task_id)
        transcript = await kernel.session_transcript(session.session_id)

    assert first.status is TaskStatus.SUCCEEDED
    tainted = [e for e in events if e.kind == "task.tainted"]
    assert [e.source for e in tainted] == ["session"]  # type: ignore[attr-defined]
    # The second task held the first one's outside content, so its own turn carries it on.
    assert all(e.tainted for e in transcript.entries)
    assert fresh.session_id != session.session_id


def _database_before_sessions(path: Path) -> None:
    conn = sqlite_driver().connect(str(path))
    before = MIGRATIONS.index(_sessions_as_conversations)
    for number, script in enumerate(MIGRATIONS[:before], start=1):
        if callable(script):
            script(conn)
        else:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(
        "INSERT INTO agent_sessions (id, created_at, updated_at) VALUES ('old', ?, ?)",
        ("2025-01-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00"),
    )
    conn.commit()
    conn.close()


async def test_an_existing_database_migrates_and_its_sessions_continue(settings) -> None:
    settings.database_path.parent.mkdir(parents=True)
    _database_before_sessions(settings.database_path)
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer))
    async with kernel_on(settings, gateway) as kernel:
        (old,) = await kernel.list_sessions()
        assert (old.session_id, old.closed_at, old.task_count) == ("old", None, 0)
        await kernel.execute_task(request("first words", "old"))
        await kernel.execute_task(request("second words", "old"))
    assert "first words" in [m.content for m in gateway.requests[-1].messages]


async def test_a_kernel_without_a_session_store_says_so(container) -> None:
    from fakes.stores import FakeTaskStore

    container.task_store.override(FakeTaskStore())
    kernel = container.kernel()
    with pytest.raises(UsageError, match="no session history"):
        await kernel.list_sessions()
    # Its tasks still run, each on its own.
    assert (await kernel.execute_task(request("hello", "s1"))).status is TaskStatus.SUCCEEDED


def answer_and_summarize(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    """``answer``, except that a summary request is answered with a summary."""
    task = next(m.content for m in reversed(messages) if isinstance(m, UserMessage))
    if task.startswith("Previous summary:"):
        return ScriptedTurn(content="SUMMARY: the person said hello and asked about cats")
    return answer(messages)


async def test_a_session_is_compacted_on_request_and_later_tasks_start_from_the_summary(
    settings,
) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer_and_summarize))
    async with kernel_on(settings, gateway) as kernel:
        session = await kernel.create_session()
        await kernel.execute_task(request("hello", session.session_id))
        last = await kernel.execute_task(request("what about cats?", session.session_id))

        summary = await kernel.compact_session(session.session_id)
        assert summary is not None
        assert summary.content == "SUMMARY: the person said hello and asked about cats"
        assert summary.task_id == last.task_id and summary.through_seq == 4
        assert summary.usage.input_tokens > 0  # what the summary cost is told
        assert await kernel.compact_session(session.session_id) is None  # nothing new
        spans = await kernel.task_spans(last.task_id)
        (span,) = [s for s in spans if s.name == "memory.compaction"]
        assert span.attributes["requested"] is True and span.attributes["folded_turns"] == 2

        await kernel.execute_task(request("and dogs?", session.session_id))
        sent = [m.content or "" for m in gateway.requests[-1].messages]
        transcript = await kernel.session_transcript(session.session_id)

    assert any(SUMMARY_HEADER in text and "asked about cats" in text for text in sent)
    assert "hello" not in sent and "what about cats?" not in sent  # folded into the summary
    assert len(transcript.entries) == 6  # the transcript keeps every turn


async def test_a_failed_compaction_on_request_says_why_and_changes_nothing(settings) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        session = await kernel.create_session()
        await kernel.execute_task(request("hello", session.session_id))
        with pytest.raises(ModelError, match="summaries are down"):
            await kernel.compact_session(session.session_id)
        assert (await kernel.session_transcript(session.session_id)).summaries == []
        with pytest.raises(SessionNotFoundError):
            await kernel.compact_session("no-such-session")
        empty = await kernel.create_session()
        assert await kernel.compact_session(empty.session_id) is None


async def test_a_script_matched_on_the_last_message_plays_each_turn_of_a_session(
    settings,
) -> None:
    gateway = ScriptedLLMGateway(
        conversations=[
            ScriptedConversation(on="last", match="^first", turns=[ScriptedTurn(content="one")]),
            ScriptedConversation(
                on="last",
                match="^second",
                turns=[
                    ScriptedTurn(tool_calls=[ScriptedToolCall(name="fetch_note")]),
                    ScriptedTurn(content="two"),
                ],
            ),
        ]
    )
    async with kernel_on(settings, gateway) as kernel:
        session = await kernel.create_session()
        first = await kernel.execute_task(request("first question", session.session_id))
        second = await kernel.execute_task(request("second question", session.session_id))
    # The second task starts from the first's turn, yet gets its own conversation's turns.
    assert (first.output, second.output) == ("one", "two")


@pytest.mark.parametrize("damage", ["entry", "record"])
async def test_a_damaged_session_is_named_and_leaves_the_others_alone(settings, damage) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        damaged = await kernel.create_session(session_id="damaged")
        healthy = await kernel.create_session(session_id="healthy")
        for session in (damaged, healthy):
            await kernel.execute_task(request("你好", session.session_id))
    with sqlite_driver().connect(Path(settings.data_dir) / "core_agent.db") as db:
        if damage == "entry":
            db.execute(
                "UPDATE agent_session_entries SET message_json = '{bad'"
                " WHERE session_id = 'damaged' AND seq = 1"
            )
        else:
            db.execute("UPDATE agent_sessions SET metadata_json = '{bad' WHERE id = 'damaged'")

    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        later = await kernel.execute_task(request("再说一遍", "healthy"))
        assert later.status is TaskStatus.SUCCEEDED
        with pytest.raises(CorruptSessionError, match="session damaged is unreadable"):
            await kernel.session_transcript("damaged")
        listed = [s.session_id for s in await kernel.list_sessions()]
        if damage == "entry":
            # Its task fails saying why, instead of a raw validation error.
            failed = await kernel.execute_task(request("再说一遍", "damaged"))
            assert failed.status is TaskStatus.FAILED
            assert "session damaged is unreadable: entry 1" in (failed.error or "")
            assert sorted(listed) == ["damaged", "healthy"]
        else:
            assert listed == ["healthy"]  # named on its own, not in the list
