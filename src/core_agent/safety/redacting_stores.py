"""Store wrappers that redact secrets on the way in (see ``redaction``).

The container wraps the task, trace, checkpoint, memory stores and the tool-call ledger with
these, so no adapter
needs to know about secrets and a third-party store gets the same protection. Reads pass
through: what was written is already clean.

A call whose arguments held a secret is stored redacted; one carried on from the stores (a
resumed or forked turn, a rerun with live tools) is refused (``refuse_redacted_call``) rather
than run with the placeholder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from core_agent.contracts.checkpoint_store import C, Checkpoint, ICheckpointStore
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem, MemoryScope
from core_agent.contracts.metrics import MetricsScope, SpanMetrics, TaskMetrics
from core_agent.contracts.session_store import DeletedSession, ISessionStore, SessionHistory
from core_agent.contracts.task_store import ApprovalDecided, ApprovalRecord, ITaskStore, TaskPage
from core_agent.contracts.tool_call_ledger import IToolCallLedger, LedgerEntry, LedgerStatus
from core_agent.contracts.trace_store import ITraceStore, Span, TraceRecording, cut_text
from core_agent.safety.redaction import Redactor
from shared.agent_protocol import (
    ApprovalRequest,
    ChatMessage,
    SessionEntry,
    SessionInfo,
    SessionSummary,
    TaskEvent,
    TaskState,
    TaskStatus,
    TokenUsage,
    ToolResult,
)


class RedactingTaskStore(ITaskStore):
    """Redacts tasks (request, output, error) and events before they are stored."""

    def __init__(self, inner: ITaskStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def create_task(
        self,
        task: TaskState,
        queued_event: TaskEvent,
        *,
        exclusive: bool = False,
        supersede_turn: int | None = None,
    ) -> None:
        """See ``ITaskStore.create_task``."""
        await self._inner.create_task(
            self._redactor.model(task),
            self._redactor.model(queued_event),
            exclusive=exclusive,
            supersede_turn=supersede_turn,
        )

    async def insert_task(self, task: TaskState, events: Sequence[TaskEvent]) -> None:
        """See ``ITaskStore.insert_task``."""
        redact = self._redactor.model
        await self._inner.insert_task(redact(task), [redact(event) for event in events])

    def session_store(self) -> ISessionStore | None:
        """The inner store's session store, redacting too (see ``RedactingSessionStore``)."""
        inner = self._inner.session_store()
        return RedactingSessionStore(inner, self._redactor) if inner is not None else None

    async def get_task(self, task_id: str) -> TaskState:
        """See ``ITaskStore.get_task``."""
        return await self._inner.get_task(task_id)

    async def list_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        limit: int = 50,
    ) -> list[TaskState]:
        """See ``ITaskStore.list_tasks``."""
        return await self._inner.list_tasks(session_id=session_id, status=status, limit=limit)

    async def page_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        text: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> TaskPage:
        """See ``ITaskStore.page_tasks``."""
        return await self._inner.page_tasks(
            session_id=session_id, status=status, text=text, cursor=cursor, limit=limit
        )

    async def match_task_ids(self, reference: str, *, limit: int = 10) -> list[str]:
        """See ``ITaskStore.match_task_ids``."""
        return await self._inner.match_task_ids(reference, limit=limit)

    async def transition(
        self,
        task_id: str,
        *,
        from_status: TaskStatus,
        to_status: TaskStatus,
        event: TaskEvent | None = None,
        strategy: str | None = None,
        output: str | None = None,
        error: str | None = None,
        usage: TokenUsage | None = None,
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """See ``ITaskStore.transition``."""
        text = self._redactor.text
        await self._inner.transition(
            task_id,
            from_status=from_status,
            to_status=to_status,
            event=self._redactor.model(event) if event is not None else None,
            strategy=strategy,
            output=text(output) if output is not None else None,
            error=text(error) if error is not None else None,
            usage=usage,
            then=then,
        )

    async def append_event(self, event: TaskEvent) -> None:
        """See ``ITaskStore.append_event``."""
        await self._inner.append_event(self._redactor.model(event))

    async def list_events(self, task_id: str) -> Sequence[TaskEvent]:
        """See ``ITaskStore.list_events``."""
        return await self._inner.list_events(task_id)

    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """See ``ITaskStore.unit_of_work``."""
        async with self._inner.unit_of_work():
            yield

    @contextlib.asynccontextmanager
    async def all_or_nothing(self) -> AsyncIterator[None]:
        """See ``ITaskStore.all_or_nothing``."""
        async with self._inner.all_or_nothing():
            yield

    async def flush(self) -> None:
        """See ``ITaskStore.flush``."""
        await self._inner.flush()

    def independent_work(self) -> contextlib.AbstractContextManager[None]:
        """See ``ITaskStore.independent_work``."""
        return self._inner.independent_work()

    def hand_over(self) -> bool:
        """See ``ITaskStore.hand_over``."""
        return self._inner.hand_over()

    def fenced(self, task_id: str, owner: str) -> contextlib.AbstractContextManager[None]:
        """See ``ITaskStore.fenced``."""
        return self._inner.fenced(task_id, owner)

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """See ``ITaskStore.after_commit``."""
        return self._inner.after_commit(callback)

    async def acquire_lease(self, task_id: str, *, owner: str, until: datetime) -> bool:
        """See ``ITaskStore.acquire_lease``."""
        return await self._inner.acquire_lease(task_id, owner=owner, until=until)

    async def renew_leases(
        self, owner: str, task_ids: Sequence[str], *, until: datetime
    ) -> set[str]:
        """See ``ITaskStore.renew_leases``."""
        return await self._inner.renew_leases(owner, task_ids, until=until)

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        """See ``ITaskStore.release_lease``."""
        await self._inner.release_lease(task_id, owner=owner)

    async def orphaned_tasks(self, *, now: datetime, limit: int = 100) -> list[TaskState]:
        """See ``ITaskStore.orphaned_tasks``."""
        return await self._inner.orphaned_tasks(now=now, limit=limit)

    async def request_cancel(self, task_id: str, reason: str) -> None:
        """See ``ITaskStore.request_cancel``."""
        await self._inner.request_cancel(task_id, self._redactor.text(reason))

    async def cancel_requests(self, task_ids: Sequence[str]) -> dict[str, str]:
        """See ``ITaskStore.cancel_requests``."""
        return await self._inner.cancel_requests(task_ids)

    async def pending_approvals(self, *, limit: int = 1000) -> list[ApprovalRequest]:
        """See ``ITaskStore.pending_approvals``."""
        return await self._inner.pending_approvals(limit=limit)

    async def approval(self, request_id: str) -> ApprovalRecord | None:
        """See ``ITaskStore.approval``."""
        return await self._inner.approval(request_id)

    async def decide_approval(
        self,
        resolved: TaskEvent,
        *,
        then: TaskStatus,
        owner: str | None = None,
        lease_until: datetime | None = None,
        error: str | None = None,
        ending: TaskEvent | None = None,
        follow: Callable[[], Awaitable[None]] | None = None,
    ) -> ApprovalDecided | None:
        """See ``ITaskStore.decide_approval``; the reason and the ending's error redacted.

        What ``follow`` writes goes through the redacting stores it uses.
        """
        return await self._inner.decide_approval(
            self._redactor.model(resolved),
            then=then,
            owner=owner,
            lease_until=lease_until,
            error=self._redactor.text(error) if error is not None else None,
            ending=self._redactor.model(ending) if ending is not None else None,
            follow=follow,
        )

    async def task_metrics(self, scope: MetricsScope) -> TaskMetrics:
        """See ``ITaskStore.task_metrics``."""
        return await self._inner.task_metrics(scope)

    async def close(self) -> None:
        """See ``ITaskStore.close``."""
        await self._inner.close()


class RedactingTraceStore(ITraceStore):
    """Redacts span names, errors and attribute values before they are stored.

    The attributes' names are the kernel's own (what a step holds goes in their values), so
    they are not searched: a span is written at every step. Then every text of the span is
    cut to the inner store's ``recording.content_max_chars``: here, since a cut made before
    the redaction could leave the head of a secret behind.

    When the redactor's search of a JSON text is as good as one of its strings
    (``Redactor.searches_json_whole``: no user pattern), the attributes are first searched
    as one JSON text, and a span in which it finds nothing to redact or cut (almost every
    span) goes on as it came, without a search of each of its strings and a copy. That holds
    as long as each string is in the text as it is: the escaped quotes are put back, and a
    text with any other character escaped (a newline, a tab, a backslash) is searched string
    by string.
    """

    def __init__(
        self, inner: ITraceStore, redactor: Redactor, *, scan_whole_payload: bool | None = None
    ) -> None:
        """Wrap ``inner``; ``scan_whole_payload`` says whether to search attributes whole.

        By default they are when the redactor allows it; ``False`` searches them string by
        string always.
        """
        self._inner = inner
        self._redactor = redactor
        allowed = redactor.searches_json_whole
        self._scan_whole_payload = (
            allowed if scan_whole_payload is None else (scan_whole_payload and allowed)
        )

    @property
    def recording(self) -> TraceRecording:
        """The inner store's (see ``ITraceStore.recording``)."""
        return self._inner.recording

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """See ``ITraceStore.after_commit``."""
        return self._inner.after_commit(callback)

    async def record(self, span: Span) -> None:
        """See ``ITraceStore.record``."""
        redact = self._redactor
        limit = self._inner.recording.content_max_chars
        error = span.error
        name = redact.text(span.name)
        if error is not None:
            error = cut_text(redact.text(error), limit)
        if name is span.name and error is span.error and self._clean(span.attributes, limit):
            await self._inner.record(span)
            return
        # Built whole rather than with dataclasses.replace, which costs more (every step).
        await self._inner.record(
            Span(
                span_id=span.span_id,
                trace_id=span.trace_id,
                task_id=span.task_id,
                kind=span.kind,
                name=name,
                started_at=span.started_at,
                ended_at=span.ended_at,
                status=span.status,
                parent_span_id=span.parent_span_id,
                tokens_in=span.tokens_in,
                tokens_out=span.tokens_out,
                cost_usd=span.cost_usd,
                error=error,
                attributes=redact.data(span.attributes, max_chars=limit, keys=False),
            )
        )

    def _clean(self, attributes: dict[str, Any], limit: int) -> bool:
        """Whether no string of ``attributes`` would be redacted or cut (see the class)."""
        if not self._scan_whole_payload:
            return False
        try:
            # As the trace stores encode them (non-JSON values by ``str``): what they write.
            text = to_json(attributes, fallback=str).decode()
        except PydanticSerializationError:
            return False  # searched string by string, as the store will find it
        # Quotes put back (JSON texts within a span's JSON: tool arguments), every string is
        # in the text as it is, unless another character was escaped: a backslash is left.
        text = text.replace('\\"', '"')
        if len(text) > limit or "\\" in text:
            return False
        # A member named like a secret is redacted by its name, whatever its value holds (a
        # value that starts with a quote is no longer one string in this text).
        return not (
            self._redactor.contains_secret(text) or self._redactor.names_secret_member(text)
        )

    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """See ``ITraceStore.list_spans``."""
        return await self._inner.list_spans(task_id=task_id, trace_id=trace_id)

    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        """See ``ITraceStore.span_metrics``."""
        return await self._inner.span_metrics(scope)

    async def close(self) -> None:
        """See ``ITraceStore.close``."""
        await self._inner.close()


class RedactingCheckpointStore(ICheckpointStore):
    """Redacts checkpoints and their messages before they are stored.

    A run resumed from them sees ``[REDACTED]`` where a secret was: the model lost sight of
    it, which is the price of never writing it down.
    """

    def __init__(self, inner: ICheckpointStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def save(self, task_id: str, key: str, checkpoint: Checkpoint) -> None:
        """See ``ICheckpointStore.save``."""
        await self._inner.save(task_id, key, self._redactor.model(checkpoint))

    async def load(self, task_id: str, key: str, model: type[C]) -> C | None:
        """See ``ICheckpointStore.load``."""
        return await self._inner.load(task_id, key, model)

    async def append_messages(
        self, task_id: str, key: str, first: int, messages: Sequence[ChatMessage]
    ) -> None:
        """See ``ICheckpointStore.append_messages``."""
        await self._inner.append_messages(
            task_id, key, first, [self._redactor.model(message) for message in messages]
        )

    async def load_messages(self, task_id: str, key: str, count: int) -> list[ChatMessage]:
        """See ``ICheckpointStore.load_messages``."""
        return await self._inner.load_messages(task_id, key, count)

    async def list_keys(self, task_id: str) -> list[str]:
        """See ``ICheckpointStore.list_keys``."""
        return await self._inner.list_keys(task_id)

    async def close(self) -> None:
        """See ``ICheckpointStore.close``."""
        await self._inner.close()


class RedactingToolCallLedger(IToolCallLedger):
    """Redacts the calls' arguments and results before they are stored."""

    def __init__(self, inner: IToolCallLedger, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def begin(self, entry: LedgerEntry) -> LedgerEntry:
        """See ``IToolCallLedger.begin``."""
        redact = self._redactor
        return await self._inner.begin(
            dataclasses.replace(
                entry,
                arguments=self._arguments(entry.arguments),
                result=redact.model(entry.result) if entry.result is not None else None,
            )
        )

    def _arguments(self, arguments: str) -> str:
        """The arguments' JSON text with each of its strings redacted.

        The text spells a quote, a backslash, a control character and every non-ASCII
        character (``ensure_ascii``: a Chinese password) otherwise: searched as text, a secret
        holding one was stored. The JSON is written again as it was made (``call_ledger``),
        then searched whole as before, for a user's pattern written against JSON text.
        """
        redact = self._redactor
        # Without a backslash every string is in the text as it is (``RedactingTraceStore``):
        # searched whole, it is searched as each string would be, for the cost of one search.
        if "\\" not in arguments and redact.searches_json_whole:
            return redact.text(arguments)
        try:
            data = json.loads(arguments)
        except ValueError:
            data = cleaned = None
        else:
            cleaned = redact.data(data)
        if cleaned != data:
            arguments = json.dumps(cleaned, sort_keys=True, default=str)
        return redact.text(arguments)

    async def finish(
        self,
        idempotency_key: str,
        result: ToolResult,
        *,
        status: LedgerStatus = "finished",
        note: str | None = None,
    ) -> None:
        """See ``IToolCallLedger.finish``."""
        await self._inner.finish(
            idempotency_key, self._redactor.model(result), status=status, note=note
        )

    async def entries(self, task_id: str) -> list[LedgerEntry]:
        """See ``IToolCallLedger.entries``."""
        return await self._inner.entries(task_id)

    async def close(self) -> None:
        """See ``IToolCallLedger.close``."""
        await self._inner.close()


class RedactingMemoryStore(IMemoryStore):
    """Redacts remembered keys and values before they are stored (and embedded)."""

    def __init__(self, inner: IMemoryStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def put(
        self, scope: MemoryScope, namespace: str, key: str, value: Any, *, tainted: bool = False
    ) -> MemoryItem:
        """See ``IMemoryStore.put``."""
        return await self._inner.put(
            scope,
            namespace,
            self._redactor.text(key),
            self._redactor.data(value),
            tainted=tainted,
        )

    async def get(self, scope: MemoryScope, namespace: str, key: str) -> MemoryItem | None:
        """See ``IMemoryStore.get``."""
        return await self._inner.get(scope, namespace, key)

    async def search(
        self, scope: MemoryScope, namespace: str, query: str, limit: int = 10
    ) -> list[MemoryItem]:
        """See ``IMemoryStore.search``."""
        return await self._inner.search(scope, namespace, query, limit)

    async def delete(self, scope: MemoryScope, namespace: str, key: str) -> bool:
        """See ``IMemoryStore.delete``."""
        return await self._inner.delete(scope, namespace, key)

    async def close(self) -> None:
        """See ``IMemoryStore.close``."""
        await self._inner.close()


class RedactingSessionStore(ISessionStore):
    """Redacts sessions' metadata, history and summaries before they are stored."""

    def __init__(self, inner: ISessionStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def create_session(self, session: SessionInfo) -> None:
        """See ``ISessionStore.create_session``."""
        await self._inner.create_session(self._redactor.model(session))

    async def get_session(self, session_id: str) -> SessionInfo:
        """See ``ISessionStore.get_session``."""
        return await self._inner.get_session(session_id)

    async def list_sessions(
        self, *, user_id: str | None = None, limit: int = 50
    ) -> list[SessionInfo]:
        """See ``ISessionStore.list_sessions``."""
        return await self._inner.list_sessions(user_id=user_id, limit=limit)

    async def close_session(self, session_id: str, *, at: datetime) -> SessionInfo:
        """See ``ISessionStore.close_session``."""
        return await self._inner.close_session(session_id, at=at)

    async def delete_session(self, session_id: str) -> DeletedSession:
        """See ``ISessionStore.delete_session``."""
        return await self._inner.delete_session(session_id)

    async def fork_session(
        self, session_id: str, *, at_turn: int, new_session: SessionInfo
    ) -> SessionInfo:
        """See ``ISessionStore.fork_session``."""
        return await self._inner.fork_session(
            session_id, at_turn=at_turn, new_session=self._redactor.model(new_session)
        )

    async def append_turn(
        self,
        session_id: str,
        task_id: str,
        messages: Sequence[ChatMessage],
        *,
        tainted: bool,
        at: datetime,
    ) -> list[SessionEntry]:
        """See ``ISessionStore.append_turn``."""
        return await self._inner.append_turn(
            session_id,
            task_id,
            [self._redactor.model(message) for message in messages],
            tainted=tainted,
            at=at,
        )

    async def history(self, session_id: str) -> SessionHistory:
        """See ``ISessionStore.history``."""
        return await self._inner.history(session_id)

    async def entries(self, session_id: str) -> list[SessionEntry]:
        """See ``ISessionStore.entries``."""
        return await self._inner.entries(session_id)

    async def summaries(self, session_id: str) -> list[SessionSummary]:
        """See ``ISessionStore.summaries``."""
        return await self._inner.summaries(session_id)

    async def save_summary(self, summary: SessionSummary) -> None:
        """See ``ISessionStore.save_summary``."""
        await self._inner.save_summary(self._redactor.model(summary))

    async def close(self) -> None:
        """See ``ISessionStore.close``."""
        await self._inner.close()
