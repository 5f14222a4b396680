"""Forking a session at a turn and retrying it from a turn: real SQLite, the scripted model.

What a host sees: the sessions and transcripts, the errors, and, through a recording
gateway, what the model was sent by the tasks that come after.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial

import anyio
import pytest
from rich.console import Console

from core_agent.contracts.errors import (
    SessionBusyError,
    SessionClosedError,
    SessionNotFoundError,
    StorageError,
    UsageError,
)
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMStreamItem
from core_agent.contracts.settings import AgentSettings
from core_agent.memory.session_history import SUMMARY_HEADER
from core_agent.session_commands import print_transcript
from fakes.gateways import FakeRecordingGateway
from integration.test_sessions import HeldGateway, answer, answer_and_summarize, kernel_on, request
from providers.scripted_gateway import (
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from providers.sqlite.database import sqlite_driver
from providers.sqlite.migrations import (
    MIGRATIONS,
    _forks_carry_usage,
    _sessions_fork_and_retry,
    _statements,
)
from shared.agent_protocol import (
    ChatMessage,
    SessionOrigin,
    TaskResult,
    TaskStatus,
    TokenUsage,
    UserMessage,
)

pytestmark = pytest.mark.anyio


def said(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages if m.kind in ("user", "assistant")]


async def three_turns(kernel) -> str:  # type: ignore[no-untyped-def]
    session = await kernel.create_session(user_id="ada", metadata={"book": "Emma"})
    for text in ("first", "second", "third"):
        result = await kernel.execute_task(request(text, session.session_id))
        assert result.status is TaskStatus.SUCCEEDED
    return str(session.session_id)


async def test_a_fork_holds_the_history_up_to_its_turn_and_its_tasks_see_only_that(
    settings,
) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer))
    async with kernel_on(settings, gateway) as kernel:
        origin = await three_turns(kernel)
        before = await kernel.session_transcript(origin)

        fork = await kernel.fork_session(origin, at_turn=2)
        assert fork.forked_from == SessionOrigin(session_id=origin, turn=2)
        assert (fork.user_id, fork.metadata, fork.task_count) == ("ada", {"book": "Emma"}, 0)
        copied = (await kernel.session_transcript(fork.session_id)).entries
        assert [(e.seq, e.turn, e.message.content) for e in copied] == [
            (1, 1, "first"),
            (2, 1, "answered: first"),
            (3, 2, "second"),
            (4, 2, "answered: second"),
        ]
        assert [e.task_id for e in copied] == [e.task_id for e in before.entries[:4]]

        await kernel.execute_task(request("in the fork", fork.session_id))
        sent_in_fork = said(gateway.requests[-1].messages)
        await kernel.execute_task(request("in the origin", origin))
        sent_in_origin = said(gateway.requests[-1].messages)
        latest = await kernel.fork_session(origin)  # at its latest turn
        after = await kernel.session_transcript(origin)

    assert sent_in_fork == ["first", "answered: first", "second", "answered: second", "in the fork"]
    assert "third" in sent_in_origin and "in the fork" not in sent_in_origin
    # The origin is untouched by the fork and by the fork's task.
    assert after.entries[:6] == before.entries and len(after.entries) == 8
    assert latest.forked_from == SessionOrigin(session_id=origin, turn=4)


async def test_a_retry_supersedes_the_turn_and_those_after_it_and_replaces_them(
    settings,
) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer))
    async with kernel_on(settings, gateway) as kernel:
        session = await three_turns(kernel)
        retried = await kernel.retry_from_turn(session, 2, task="second, said better")
        sent_by_retry = said(gateway.requests[-1].messages)
        transcript = await kernel.session_transcript(session)
        retry_task = await kernel.get_task(retried.task_id)
        await kernel.execute_task(request("next", session))
        sent_next = said(gateway.requests[-1].messages)
        again = await kernel.retry_from_turn(session, 4)  # its own text this time
        sent_again = said(gateway.requests[-1].messages)

    assert retried.status is TaskStatus.SUCCEEDED
    assert retried.output == "answered: second, said better"
    assert sent_by_retry == ["first", "answered: first", "second, said better"]
    assert retry_task.session_id == session and retry_task.request.metadata["retry_of_turn"] == 2
    assert [(e.turn, e.message.content, e.superseded_by) for e in transcript.entries] == [
        (1, "first", None),
        (1, "answered: first", None),
        (2, "second", retried.task_id),
        (2, "answered: second", retried.task_id),
        (3, "third", retried.task_id),
        (3, "answered: third", retried.task_id),
        (4, "second, said better", None),
        (4, "answered: second, said better", None),
    ]
    assert sent_next == [
        "first",
        "answered: first",
        "second, said better",
        "answered: second, said better",
        "next",
    ]
    # Retrying turn 4 supersedes it and turn 5 ("next"), and runs its text again.
    assert sent_again == ["first", "answered: first", "second, said better"]
    assert again.output == "answered: second, said better"


async def test_a_summary_of_superseded_turns_is_superseded_and_a_fork_keeps_its_summary(
    settings,
) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer_and_summarize))
    async with kernel_on(settings, gateway) as kernel:
        session = await kernel.create_session()
        await kernel.execute_task(request("hello", session.session_id))
        await kernel.execute_task(request("what about cats?", session.session_id))
        summary = await kernel.compact_session(session.session_id)
        assert summary is not None and summary.through_seq == 4

        fork = await kernel.fork_session(session.session_id, at_turn=2)
        await kernel.execute_task(request("and dogs?", fork.session_id))
        sent_in_fork = [m.content or "" for m in gateway.requests[-1].messages]

        await kernel.retry_from_turn(session.session_id, 2)
        sent_by_retry = [m.content or "" for m in gateway.requests[-1].messages]
        transcript = await kernel.session_transcript(session.session_id)

    assert any(SUMMARY_HEADER in text for text in sent_in_fork)
    assert "hello" not in sent_in_fork  # the fork starts from the copied summary
    (stored,) = transcript.summaries
    assert stored.superseded_by is not None  # it covered turn 2, retried now
    assert not any(SUMMARY_HEADER in text for text in sent_by_retry)
    assert "hello" in sent_by_retry and "answered: what about cats?" not in sent_by_retry


async def test_bad_requests_are_refused_with_a_clear_error_and_change_nothing(
    settings,
) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        session = await three_turns(kernel)
        await kernel.retry_from_turn(session, 3)
        before = await kernel.session_transcript(session)
        sessions = len(await kernel.list_sessions())

        with pytest.raises(SessionNotFoundError):
            await kernel.fork_session("no-such-session")
        with pytest.raises(SessionNotFoundError):
            await kernel.retry_from_turn("no-such-session", 1)
        with pytest.raises(UsageError, match="has turns 1 to 4, not 9"):
            await kernel.fork_session(session, at_turn=9)
        with pytest.raises(UsageError, match="has turns 1 to 4, not 9"):
            await kernel.retry_from_turn(session, 9)
        with pytest.raises(UsageError, match=r"superseded .* its live turns are 1-2, 4"):
            await kernel.retry_from_turn(session, 3)
        with pytest.raises(UsageError, match="superseded"):
            await kernel.fork_session(session, at_turn=3)
        with pytest.raises(UsageError, match="empty"):
            await kernel.retry_from_turn(session, 1, task="  ")
        # A flag passed by mistake is no turn number (True == 1 in Python).
        with pytest.raises(UsageError, match="a turn is a whole number, not True"):
            await kernel.retry_from_turn(session, True)
        with pytest.raises(UsageError, match=r"a turn is a whole number, not 2\.0"):
            await kernel.fork_session(session, at_turn=2.0)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="exists already"):
            await kernel.fork_session(session, new_session_id=session)
        empty = await kernel.create_session()
        with pytest.raises(UsageError, match="no turns yet: nothing to fork"):
            await kernel.fork_session(empty.session_id)
        await kernel.close_session(session)
        with pytest.raises(SessionClosedError):
            await kernel.retry_from_turn(session, 1)

        assert await kernel.session_transcript(session) == before.model_copy(
            update={"session": (await kernel.get_session(session))}
        )
        assert len(await kernel.list_sessions()) == sessions + 1  # only `empty`


async def test_a_session_with_a_task_not_ended_is_neither_forked_nor_retried(settings) -> None:
    held = HeldGateway()
    async with kernel_on(settings, held) as kernel:
        session = await kernel.create_session()
        held.release.set()
        await kernel.execute_task(request("first", session.session_id))
        held.release, held.entered = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(kernel.execute_task, request("slow", session.session_id))
            await held.entered.wait()
            with pytest.raises(SessionBusyError, match="fork the session once"):
                await kernel.fork_session(session.session_id, at_turn=1)
            with pytest.raises(SessionBusyError, match="retry once"):
                await kernel.retry_from_turn(session.session_id, 1)
            held.release.set()
        transcript = await kernel.session_transcript(session.session_id)
        assert [s.session_id for s in await kernel.list_sessions()] == [session.session_id]
    assert [e.superseded_by for e in transcript.entries] == [None] * 4


def fail_inserts_into(settings: AgentSettings, table: str, when: str) -> None:
    """A trigger that fails an insert half-way through a transaction, like a dying disk.

    Through the kernel's own SQLite library: another one's connection closing on the open
    database takes the write-ahead log away from under it.
    """
    conn = sqlite_driver().connect(str(settings.database_path))
    conn.execute("DROP TRIGGER IF EXISTS doomed")
    conn.execute(
        f"CREATE TRIGGER doomed BEFORE INSERT ON {table} WHEN {when}"
        " BEGIN SELECT RAISE(ABORT, 'the disk went away'); END"
    )
    conn.commit()
    conn.close()


async def test_a_fork_or_retry_that_fails_half_way_leaves_nothing_half_made(settings) -> None:
    gateway = ScriptedLLMGateway(policy=answer_and_summarize)
    async with kernel_on(settings, gateway) as kernel:
        session = await three_turns(kernel)
        await kernel.compact_session(session)
        before = await kernel.session_transcript(session)
        # The fork's session row and entries are written before its summaries fail.
        fail_inserts_into(settings, "agent_session_summaries", "NEW.session_id = 'doomed'")
        with pytest.raises(StorageError, match="the disk went away"):
            await kernel.fork_session(session, new_session_id="doomed")
        # The retry's turns are superseded before its task row fails.
        fail_inserts_into(settings, "agent_tasks", "NEW.input_json LIKE '%retry_of_turn%'")
        with pytest.raises(StorageError, match="the disk went away"):
            await kernel.retry_from_turn(session, 2)
        assert await kernel.session_transcript(session) == before
        assert [s.session_id for s in await kernel.list_sessions()] == [session]
    conn = sqlite_driver().connect(str(settings.database_path))
    count = conn.execute("SELECT COUNT(*) FROM agent_session_entries WHERE session_id = 'doomed'")
    assert count.fetchone() == (0,)
    conn.close()


async def test_turns_of_an_existing_history_are_numbered_by_the_migration(settings) -> None:
    settings.database_path.parent.mkdir(parents=True)
    conn = sqlite_driver().connect(str(settings.database_path))
    before = MIGRATIONS.index(_sessions_fork_and_retry)
    for number, script in enumerate(MIGRATIONS[:before], start=1):
        if callable(script):
            script(conn)
        else:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    at = "2025-01-01T00:00:00+00:00"
    conn.execute(
        "INSERT INTO agent_sessions (id, created_at, updated_at) VALUES ('old', ?, ?)", (at, at)
    )
    for seq, (task, text) in enumerate([("a", "one"), ("a", "1"), ("b", "two"), ("b", "2")], 1):
        conn.execute(
            "INSERT INTO agent_session_entries (session_id, seq, task_id, message_json, created_at)"
            " VALUES ('old', ?, ?, ?, ?)",
            (seq, task, f'{{"kind": "user", "content": "{text}"}}', at),
        )
    conn.commit()
    conn.close()
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        entries = (await kernel.session_transcript("old")).entries
        assert [e.turn for e in entries] == [1, 1, 2, 2]
        fork = await kernel.fork_session("old", at_turn=1)
        result = await kernel.execute_task(request("three", "old"))
        assert result.status is TaskStatus.SUCCEEDED
        assert [e.turn for e in (await kernel.session_transcript("old")).entries][-1] == 3
        assert len((await kernel.session_transcript(fork.session_id)).entries) == 2


def costly(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    """Answers like ``answer``; every call is charged 100 input tokens; "boom" fails."""
    task = next(m.content for m in reversed(messages) if isinstance(m, UserMessage))
    if task == "boom":
        return ScriptedTurn(error=ScriptedError(message="the model is down", status_code=400))
    return ScriptedTurn(content=f"answered: {task}", usage=TokenUsage(input_tokens=100))


async def test_a_fork_counts_what_its_origin_used_against_the_session_limits(settings) -> None:
    limited = settings.model_copy(update={"session_limit_input_tokens": 200})
    async with kernel_on(limited, ScriptedLLMGateway(policy=costly)) as kernel:
        origin = (await kernel.create_session()).session_id
        for text in ("one", "two"):
            assert (await kernel.execute_task(request(text, origin))).status is TaskStatus.SUCCEEDED
        spent = await kernel.execute_task(request("three", origin))
        assert spent.status is TaskStatus.FAILED and "session usage limit" in (spent.error or "")

        # Forked at its latest turn, a session would otherwise start a fresh budget.
        latest = await kernel.fork_session(origin)
        assert latest.inherited_usage.input_tokens == 200
        refused = await kernel.execute_task(request("go on", latest.session_id))
        assert refused.status is TaskStatus.FAILED, "a fork is no way around the limit"
        assert "session usage limit input_tokens" in (refused.error or "")
        # A fork of the fork, and the origin deleted: still counted.
        again = await kernel.fork_session(latest.session_id, at_turn=2)
        await kernel.delete_session(origin)
        await kernel.delete_session(latest.session_id)
        assert (await kernel.get_session(again.session_id)).inherited_usage.input_tokens == 200
        also = await kernel.execute_task(request("go on", again.session_id))
        assert also.status is TaskStatus.FAILED

    async with kernel_on(limited, ScriptedLLMGateway(policy=costly)) as kernel:
        origin = (await kernel.create_session()).session_id
        for text in ("one", "two"):
            await kernel.execute_task(request(text, origin))
        # Forked at turn 1: only what the session had used when turn 1 ended is carried.
        early = await kernel.fork_session(origin, at_turn=1)
        assert early.inherited_usage.input_tokens == 100
        fits = await kernel.execute_task(request("other two", early.session_id))
        assert fits.status is TaskStatus.SUCCEEDED
        over = await kernel.execute_task(request("other three", early.session_id))
        assert over.status is TaskStatus.FAILED


async def test_a_retry_that_fails_leaves_its_failed_turn_which_can_be_retried(settings) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=costly)) as kernel:
        session = await three_turns(kernel)
        failed = await kernel.retry_from_turn(session, 2, task="boom")
        assert failed.status is TaskStatus.FAILED
        entries = (await kernel.session_transcript(session)).entries
        live = [(e.turn, e.message.content) for e in entries if e.superseded_by is None]
        assert live[:2] == [(1, "first"), (1, "answered: first")]
        assert {turn for turn, _ in live} == {1, 4}  # the failed retry's turn says why
        with pytest.raises(UsageError, match="its live turns are 1, 4"):
            await kernel.retry_from_turn(session, 2)
        fixed = await kernel.retry_from_turn(session, 4, task="second, again")
        assert fixed.status is TaskStatus.SUCCEEDED
        live = [
            e.message.content
            for e in (await kernel.session_transcript(session)).entries
            if e.superseded_by is None
        ]
        assert live == ["first", "answered: first", "second, again", "answered: second, again"]


async def test_a_retry_canceled_by_its_caller_leaves_the_turn_retryable_again(settings) -> None:
    held = HeldGateway()
    async with kernel_on(settings, held) as kernel:
        held.release.set()
        session = await three_turns(kernel)
        held.release, held.entered = anyio.Event(), anyio.Event()
        with anyio.move_on_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(kernel.retry_from_turn, session, 2)
                await held.entered.wait()
                group.cancel_scope.cancel()  # the caller gives up (Ctrl-C)
        held.release.set()
        transcript = await kernel.session_transcript(session)
        assert [e.turn for e in transcript.entries if e.superseded_by is None] == [1, 1]
        shown = io.StringIO()
        print_transcript(Console(file=shown, width=300), transcript)
        assert "── turn 2 · superseded by the retry in task" in shown.getvalue()
        assert "which has no turn yet (if it has ended, this turn can be retried again)" in (
            shown.getvalue()
        )
        again = await kernel.retry_from_turn(session, 2, task="second, once more")
        assert again.status is TaskStatus.SUCCEEDED
        transcript = await kernel.session_transcript(session)
    live = [e.message.content for e in transcript.entries if e.superseded_by is None]
    assert live == ["first", "answered: first", "second, once more", "answered: second, once more"]
    superseded = {e.turn: e.superseded_by for e in transcript.entries if e.superseded_by}
    assert superseded == {2: again.task_id, 3: again.task_id}


async def test_two_retries_and_a_task_at_once_from_two_kernels_one_gets_in(settings) -> None:
    held = HeldGateway()
    async with kernel_on(settings, held) as first, kernel_on(settings, held) as second:
        held.release.set()
        session = await three_turns(first)
        held.release, held.entered = anyio.Event(), anyio.Event()
        won: list[TaskResult] = []
        lost: list[Exception] = []

        async def contend(run: Callable[[], Awaitable[TaskResult]]) -> None:
            try:
                won.append(await run())
            except (SessionBusyError, UsageError) as exc:
                lost.append(exc)
                if len(lost) == 2:  # the winner runs on only once both others are out
                    held.release.set()

        async with anyio.create_task_group() as group:
            group.start_soon(contend, partial(first.retry_from_turn, session, 2, task="by 1"))
            group.start_soon(contend, partial(second.retry_from_turn, session, 2, task="by 2"))
            group.start_soon(contend, partial(second.execute_task, request("normal", session)))
        transcript = await first.session_transcript(session)
    (winner,) = won
    assert winner.status is TaskStatus.SUCCEEDED and len(lost) == 2
    live = [e.message.content for e in transcript.entries if e.superseded_by is None]
    superseded = {e.superseded_by for e in transcript.entries if e.superseded_by}
    if winner.output == "answered: normal":
        assert len(live) == 8 and not superseded
    else:
        assert live == [
            "first",
            "answered: first",
            winner.output[len("answered: ") :],
            winner.output,
        ]
        assert superseded == {winner.task_id}


async def test_a_summary_reaching_past_the_fork_turn_is_not_copied(settings) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer_and_summarize))
    async with kernel_on(settings, gateway) as kernel:
        session = await three_turns(kernel)
        summary = await kernel.compact_session(session)  # covers turns 1-3
        assert summary is not None and summary.through_seq == 6
        fork = await kernel.fork_session(session, at_turn=2)
        assert (await kernel.session_transcript(fork.session_id)).summaries == []
        await kernel.execute_task(request("in the fork", fork.session_id))
        sent = " ".join(m.content or "" for m in gateway.requests[-1].messages)
    assert "third" not in sent and SUMMARY_HEADER not in sent
    assert "second" in sent


async def test_chinese_text_is_forked_and_retried_as_written(settings) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        session = (await kernel.create_session()).session_id
        await kernel.execute_task(request("你好，世界", session))
        retried = await kernel.retry_from_turn(session, 1, task="请再说一遍：天气怎么样？")
        fork = await kernel.fork_session(session)
        copied = (await kernel.session_transcript(fork.session_id)).entries
    assert retried.output == "answered: 请再说一遍：天气怎么样？"
    assert [e.message.content for e in copied] == [
        "请再说一遍：天气怎么样？",
        "answered: 请再说一遍：天气怎么样？",
    ]


async def test_the_migration_runs_twice_harmlessly(settings) -> None:
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        session = await three_turns(kernel)
        await kernel.retry_from_turn(session, 2)
        before = await kernel.session_transcript(session)
    conn = sqlite_driver().connect(str(settings.database_path))
    _sessions_fork_and_retry(conn)
    _forks_carry_usage(conn)
    conn.commit()
    conn.close()
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        assert await kernel.session_transcript(session) == before


async def test_a_fork_lives_on_when_its_origin_is_deleted_and_retries_from_the_turns_text(
    settings,
) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=answer))
    async with kernel_on(settings, gateway) as kernel:
        origin = await three_turns(kernel)
        fork = await kernel.fork_session(origin, at_turn=2)
        branch = await kernel.fork_session(fork.session_id)  # a fork of the fork
        await kernel.delete_session(origin)
        retried = await kernel.retry_from_turn(fork.session_id, 2)  # its task is gone
        sent = said(gateway.requests[-1].messages)
        shown = await kernel.session_transcript(branch.session_id)
    assert retried.status is TaskStatus.SUCCEEDED and retried.output == "answered: second"
    assert sent == ["first", "answered: first", "second"]
    assert branch.forked_from == SessionOrigin(session_id=fork.session_id, turn=2)
    assert [e.message.content for e in shown.entries] == [
        "first",
        "answered: first",
        "second",
        "answered: second",
    ]


async def test_no_secret_reaches_the_disk_through_a_fork_or_a_retry(settings) -> None:
    key = "sk-proj-" + "Fk9" * 12
    async with kernel_on(settings, ScriptedLLMGateway(policy=answer)) as kernel:
        session = (await kernel.create_session()).session_id
        await kernel.execute_task(request(f"my key is {key}", session))
        fork = await kernel.fork_session(session, metadata={"note": f"key {key}"})
        retried = await kernel.retry_from_turn(fork.session_id, 1, task=f"again: {key}")
        transcript = await kernel.session_transcript(fork.session_id)
    assert retried.output == f"answered: again: {key}"  # the host gets its answer
    assert key not in transcript.model_dump_json()
    stored = b"".join(p.read_bytes() for p in settings.data_dir.rglob("*") if p.is_file())
    assert key.encode() not in stored and b"[REDACTED" in stored


class ChargedThenHeld(ILLMGateway):
    """Like ``costly``; a task "slow" calls a tool, then its next call waits for good."""

    def __init__(self) -> None:
        self.inner = ScriptedLLMGateway(policy=self.policy)
        self.entered = anyio.Event()

    @staticmethod
    def policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        task = next(m.content for m in reversed(messages) if isinstance(m, UserMessage))
        if task == "slow":
            call = ScriptedToolCall(name="fetch_note", arguments={})
            return ScriptedTurn(tool_calls=[call], usage=TokenUsage(input_tokens=100))
        return costly(messages)

    @property
    def model_name(self) -> str:
        return "charged/test"

    async def _hold(self, request: LLMRequest) -> None:
        if any(m.kind == "tool" for m in request.messages):
            self.entered.set()
            await anyio.sleep_forever()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await self._hold(request)
        return await self.inner.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        await self._hold(request)
        async for item in self.inner.stream(request):
            yield item


async def test_a_fork_counts_the_usage_of_a_task_canceled_after_its_turn(settings) -> None:
    gateway = ChargedThenHeld()
    async with kernel_on(settings, gateway) as kernel:
        origin = (await kernel.create_session()).session_id
        await kernel.execute_task(request("one", origin))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(kernel.execute_task, request("slow", origin))
                await gateway.entered.wait()
                group.cancel_scope.cancel()  # spent 100 tokens, added no turn
        assert [e.turn for e in (await kernel.session_transcript(origin)).entries] == [1, 1]
        assert sum(t.usage.input_tokens for t in await kernel.list_tasks(session_id=origin)) == 200
        fork = await kernel.fork_session(origin)
    assert fork.inherited_usage.input_tokens == 200
