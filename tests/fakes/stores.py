"""In-memory fakes of the stores, recording what happened, for unit tests."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from pydantic import BaseModel, TypeAdapter, ValidationError

from core_agent.contracts.checkpoint_store import Checkpoint, ICheckpointStore
from core_agent.contracts.errors import (
    CorruptStateError,
    InvalidTransitionError,
    StorageError,
    TaskNotFoundError,
    UsageError,
)
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem
from core_agent.contracts.metrics import (
    KERNEL_DECIDER,
    REFUSED_ERROR_TYPES,
    ApprovalMetrics,
    KindLatency,
    LatencyPercentiles,
    MetricsScope,
    ModelMetrics,
    SpanMetrics,
    TaskCounts,
    TaskMetrics,
    TokenTotals,
    ToolMetrics,
    nearest_rank,
)
from core_agent.contracts.task_store import ITaskStore, TaskPage
from core_agent.contracts.tool_call_ledger import IToolCallLedger, LedgerEntry
from core_agent.contracts.trace_store import ITraceStore, Span
from shared.agent_protocol import (
    ApprovalRequested,
    ApprovalResolved,
    ChatMessage,
    TaskState,
    TaskStatus,
    TokenUsage,
)

_MESSAGE: TypeAdapter[ChatMessage] = TypeAdapter(ChatMessage)
_ENDED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED)


def _latency(values: list[float]) -> LatencyPercentiles:
    ordered = sorted(values)
    return LatencyPercentiles(
        count=len(ordered), p50_ms=nearest_rank(ordered, 50), p95_ms=nearest_rank(ordered, 95)
    )


def _position(cursor: str) -> tuple[str, str]:
    created_at, sep, task_id = cursor.rpartition("/")
    if not sep:
        raise UsageError(f"not a page cursor of this task list: {cursor!r}")
    return created_at, task_id


class FakeTaskStore(ITaskStore):
    def __init__(self) -> None:
        self.tasks: dict[str, TaskState] = {}
        self.events: dict[str, list[BaseModel]] = {}
        self.closed = False

    async def create_task(
        self,
        task: TaskState,
        queued_event: BaseModel,
        *,
        exclusive: bool = False,
        supersede_turn: int | None = None,
    ) -> None:
        if supersede_turn is not None:
            raise UsageError("this fake keeps no session history: no turn to supersede")
        self.tasks[task.task_id] = task
        self.events[task.task_id] = [queued_event]

    async def get_task(self, task_id: str) -> TaskState:
        if task_id not in self.tasks:
            raise TaskNotFoundError(task_id)
        return self.tasks[task_id]

    async def list_tasks(self, *, session_id=None, status=None, limit=50) -> list[TaskState]:
        tasks = [
            t
            for t in self.tasks.values()
            if (session_id is None or t.session_id == session_id)
            and (status is None or t.status == status)
        ]
        return sorted(tasks, key=lambda t: t.created_at, reverse=True)[:limit]

    async def page_tasks(
        self, *, session_id=None, status=None, text=None, cursor=None, limit=50
    ) -> TaskPage:
        # Newest first; the cursor is the position after the last task shown (ids break ties).
        order = sorted(self.tasks.values(), key=lambda t: (t.created_at, t.task_id), reverse=True)
        needle = (text or "").lower()
        tasks = [
            t
            for t in order
            if (session_id is None or t.session_id == session_id)
            and (status is None or t.status == status)
            and (needle in t.request.task.lower() or needle in (t.output or "").lower())
            and (cursor is None or (t.created_at.isoformat(), t.task_id) < _position(cursor))
        ]
        page = tasks[: max(1, limit)]
        more = len(tasks) > len(page)
        return TaskPage(
            page, f"{page[-1].created_at.isoformat()}/{page[-1].task_id}" if more else None
        )

    async def match_task_ids(self, reference: str, *, limit: int = 10) -> list[str]:
        ids = sorted(t for t in self.tasks if t.startswith(reference))
        if not ids:
            ids = sorted(t.task_id for t in self.tasks.values() if t.trace_id == reference)
        return ids[:limit]

    async def transition(
        self,
        task_id: str,
        *,
        from_status: TaskStatus,
        to_status: TaskStatus,
        event: BaseModel | None = None,
        strategy: str | None = None,
        output: str | None = None,
        error: str | None = None,
        usage: TokenUsage | None = None,
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        task = await self.get_task(task_id)
        if task.status != from_status:
            raise InvalidTransitionError(task_id, task.status.value, to_status.value)
        update = {"status": to_status}
        for key, value in (
            ("strategy", strategy),
            ("output", output),
            ("error", error),
            ("usage", usage),
        ):
            if value is not None:
                update[key] = value
        self.tasks[task_id] = task.model_copy(update=update)
        if event is not None:
            self._record(event)
        if then is not None:
            await then()

    async def append_event(self, event: BaseModel) -> None:
        self._record(event)

    def _record(self, event: BaseModel) -> None:
        task_id = event.task_id  # type: ignore[attr-defined]
        self.events[task_id].append(event)
        if getattr(event, "kind", "") == "task.tainted":
            self.tasks[task_id] = self.tasks[task_id].model_copy(update={"tainted": True})

    async def list_events(self, task_id: str) -> Sequence[BaseModel]:
        return list(self.events.get(task_id, []))

    async def acquire_lease(self, task_id: str, *, owner: str, until: datetime) -> bool:
        task = await self.get_task(task_id)
        live = task.lease_expires_at is not None and task.lease_expires_at > datetime.now(UTC)
        if task.owner not in (None, owner) and live:
            return False
        self.tasks[task_id] = task.model_copy(update={"owner": owner, "lease_expires_at": until})
        return True

    async def renew_leases(self, owner: str, task_ids, *, until: datetime) -> set[str]:  # type: ignore[no-untyped-def]
        kept = {i for i in task_ids if i in self.tasks and self.tasks[i].owner == owner}
        for task_id in kept:
            self.tasks[task_id] = self.tasks[task_id].model_copy(update={"lease_expires_at": until})
        return kept

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        task = self.tasks.get(task_id)
        if task is not None and task.owner == owner:
            self.tasks[task_id] = task.model_copy(update={"owner": None, "lease_expires_at": None})

    async def orphaned_tasks(self, *, now: datetime, limit: int = 100) -> list[TaskState]:
        found = [
            t
            for t in self.tasks.values()
            if t.status in (TaskStatus.QUEUED, TaskStatus.RUNNING)
            and (t.lease_expires_at is None or t.lease_expires_at < now)
        ]
        return sorted(found, key=lambda t: t.created_at)[:limit]

    async def request_cancel(self, task_id: str, reason: str) -> None:
        task = await self.get_task(task_id)
        self.tasks[task_id] = task.model_copy(update={"cancel_requested": reason})

    async def cancel_requests(self, task_ids) -> dict[str, str]:  # type: ignore[no-untyped-def]
        return {
            i: self.tasks[i].cancel_requested  # type: ignore[misc]
            for i in task_ids
            if i in self.tasks and self.tasks[i].cancel_requested is not None
        }

    def in_scope(self, scope: MetricsScope) -> list[TaskState]:
        return [
            t
            for t in self.tasks.values()
            if (scope.since is None or t.created_at >= scope.since)
            and (scope.session_id is None or t.session_id == scope.session_id)
        ]

    async def task_metrics(self, scope: MetricsScope) -> TaskMetrics:
        by_status = dict.fromkeys(TaskStatus, 0)
        approvals = {"approved": 0, "denied": 0, "expired": 0, "pending": 0}
        waits: list[float] = []
        for task in self.in_scope(scope):
            by_status[task.status] += 1
            requests = {}
            decisions = {}
            for event in self.events.get(task.task_id, []):
                if isinstance(event, ApprovalRequested):
                    requests.setdefault(event.request.request_id, event.request)
                elif isinstance(event, ApprovalResolved):
                    decisions.setdefault(event.decision.request_id, event)
            for request_id, request in requests.items():
                resolved = decisions.get(request_id)
                if resolved is None:
                    approvals["expired" if task.status in _ENDED else "pending"] += 1
                    continue
                waits.append((resolved.occurred_at - request.created_at).total_seconds() * 1000)
                if resolved.decision.approved:
                    approvals["approved"] += 1
                elif resolved.decision.decided_by == KERNEL_DECIDER:
                    approvals["expired"] += 1
                else:
                    approvals["denied"] += 1
        return TaskMetrics(
            tasks=TaskCounts(by_status=by_status),
            approvals=ApprovalMetrics(
                requested=sum(approvals.values()), wait=_latency(waits), **approvals
            ),
        )

    async def close(self) -> None:
        self.closed = True


class FakeTraceStore(ITraceStore):
    """Spans in a list. ``span_metrics`` with a scope needs ``tasks``, the task store whose
    tasks the scope selects (a real store reads them from its database)."""

    def __init__(
        self, *, fail_on_kind: str | None = None, tasks: FakeTaskStore | None = None
    ) -> None:
        self.spans: list[Span] = []
        self.fail_on_kind = fail_on_kind
        self.tasks = tasks
        self.closed = False

    async def record(self, span: Span) -> None:
        if span.kind == self.fail_on_kind:
            raise StorageError(f"trace store refused a {span.kind} span")
        self.spans.append(span)  # frozen: kept as given, as cheaply as a store can

    async def list_spans(self, *, task_id=None, trace_id=None) -> list[Span]:
        if task_id is None and trace_id is None:
            raise UsageError("list_spans needs task_id or trace_id")
        return sorted(
            (
                s
                for s in self.spans
                if (task_id is None or s.task_id == task_id)
                and (trace_id is None or s.trace_id == trace_id)
            ),
            key=lambda s: s.started_at,
        )

    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        spans = self.spans
        if scope.since is not None or scope.session_id is not None:
            if self.tasks is None:
                raise UsageError("this FakeTraceStore was given no task store to scope by")
            ids = {t.task_id for t in self.tasks.in_scope(scope)}
            spans = [s for s in spans if s.task_id in ids]
        spent = [s for s in spans if s.kind not in ("task", "run", "llm_attempt")]
        costs = [s.cost_usd for s in spent if s.cost_usd is not None]
        by_kind: dict[str, list[float]] = {}
        for span in spans:
            by_kind.setdefault(span.kind, []).append(span.latency_ms)
        by_model: dict[str, list[Span]] = {}
        for span in spans:
            if span.kind == "llm":
                by_model.setdefault(span.attributes.get("fallback_model") or span.name, []).append(
                    span
                )
        by_tool: dict[str, list[Span]] = {}
        for span in spans:
            if span.kind == "tool" and not (
                span.status == "ok" and span.attributes.get("suspended") is not None
            ):
                by_tool.setdefault(span.name, []).append(span)

        def refused(span: Span) -> bool:
            return span.status == "error" and span.attributes.get("error_type") in (
                REFUSED_ERROR_TYPES
            )

        def model_cost(calls: list[Span]) -> float | None:
            known = [s.cost_usd for s in calls if s.cost_usd is not None]
            return sum(known) if known else None

        return SpanMetrics(
            tokens=TokenTotals(
                input=sum(s.tokens_in or 0 for s in spent),
                output=sum(s.tokens_out or 0 for s in spent),
                cost_usd=sum(costs) if costs else None,
            ),
            latency_by_kind=[
                KindLatency(kind=kind, latency=_latency(values))
                for kind, values in sorted(by_kind.items())
            ],
            models=sorted(
                (
                    ModelMetrics(
                        model=model,
                        calls=len(calls),
                        errors=sum(s.status == "error" for s in calls),
                        input_tokens=sum(s.tokens_in or 0 for s in calls),
                        output_tokens=sum(s.tokens_out or 0 for s in calls),
                        cost_usd=model_cost(calls),
                        latency=_latency([s.latency_ms for s in calls]),
                    )
                    for model, calls in by_model.items()
                ),
                key=lambda m: (-m.calls, m.model),
            ),
            tools=sorted(
                (
                    ToolMetrics(
                        tool=tool,
                        calls=len(calls),
                        errors=sum(s.status == "error" and not refused(s) for s in calls),
                        refused=sum(refused(s) for s in calls),
                        latency=_latency([s.latency_ms for s in calls]),
                    )
                    for tool, calls in by_tool.items()
                ),
                key=lambda t: (-t.calls, t.tool),
            ),
        )

    async def close(self) -> None:
        self.closed = True


class FakeCheckpointStore(ICheckpointStore):
    """Checkpoints as the JSON a real store would keep; messages in per-key lists."""

    def __init__(self) -> None:
        self.saved: dict[tuple[str, str], dict] = {}
        self.history: list[tuple[str, str, dict]] = []
        self.messages: dict[tuple[str, str], list[ChatMessage]] = {}
        self.closed = False

    async def save(self, task_id: str, key: str, checkpoint: Checkpoint) -> None:
        snapshot = json.loads(checkpoint.model_dump_json())
        self.saved[(task_id, key)] = snapshot
        self.history.append((task_id, key, snapshot))

    async def load(self, task_id: str, key: str, model):  # type: ignore[no-untyped-def]
        state = self.saved.get((task_id, key))
        if state is None:
            return None
        try:
            return model.model_validate(state)
        except ValidationError as exc:
            raise CorruptStateError(task_id, f"checkpoint {key!r}: {exc}") from exc

    async def append_messages(self, task_id: str, key: str, first: int, messages) -> None:  # type: ignore[no-untyped-def]
        log = self.messages.setdefault((task_id, key), [])
        del log[first:]
        log.extend(_MESSAGE.validate_json(_MESSAGE.dump_json(m)) for m in messages)

    async def load_messages(self, task_id: str, key: str, count: int) -> list[ChatMessage]:
        log = self.messages.get((task_id, key), [])
        if len(log) < count:
            raise CorruptStateError(task_id, f"{key!r} has {len(log)} of {count} messages")
        return list(log[:count])

    async def list_keys(self, task_id: str) -> list[str]:
        return list(dict.fromkeys(k for t, k, _ in self.history if t == task_id))

    async def close(self) -> None:
        self.closed = True


class FakeMemoryStore(IMemoryStore):
    """Keyed memory in a dict; search is a case-insensitive substring match on words."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], MemoryItem] = {}
        self.searches: list[str] = []

    async def put(self, scope, namespace, key, value, *, tainted=False):  # type: ignore[no-untyped-def]
        if not key:
            raise UsageError("memory key must be a non-empty string")
        json.dumps(value)
        now = datetime.now(UTC)
        old = self.items.get((scope, namespace, key))
        created = old.created_at if old else now
        item = MemoryItem(scope, namespace, key, value, created, now, tainted=tainted)
        self.items[(scope, namespace, key)] = item
        return item

    async def get(self, scope, namespace, key):  # type: ignore[no-untyped-def]
        return self.items.get((scope, namespace, key))

    async def search(self, scope, namespace, query, limit=10):  # type: ignore[no-untyped-def]
        self.searches.append(query)
        words = [w for w in query.lower().split() if w]
        found = [
            item
            for (s, ns, _), item in self.items.items()
            if s == scope
            and ns == namespace
            and (not words or any(w in f"{item.key} {item.value}".lower() for w in words))
        ]
        return sorted(found, key=lambda i: i.updated_at, reverse=True)[:limit]

    async def delete(self, scope, namespace, key):  # type: ignore[no-untyped-def]
        return self.items.pop((scope, namespace, key), None) is not None

    async def close(self) -> None:
        pass


class FakeToolCallLedger(IToolCallLedger):
    """Ledger entries in a dict, by idempotency key."""

    def __init__(self) -> None:
        self.entries_by_key: dict[str, LedgerEntry] = {}
        self.closed = False

    async def begin(self, entry: LedgerEntry) -> LedgerEntry:
        stored = self.entries_by_key.setdefault(entry.idempotency_key, entry)
        if stored is not entry and stored.status != "finished":
            stored = self.entries_by_key[entry.idempotency_key] = replace(
                stored, started_at=entry.started_at
            )
        return stored

    async def finish(self, idempotency_key, result, *, status="finished", note=None) -> None:  # type: ignore[no-untyped-def]
        entry = self.entries_by_key[idempotency_key]
        self.entries_by_key[idempotency_key] = replace(
            entry,
            status=status,
            result=result,
            ended_at=datetime.now(UTC),
            note=note or entry.note,
        )

    async def entries(self, task_id: str) -> list[LedgerEntry]:
        found = [e for e in self.entries_by_key.values() if e.task_id == task_id]
        return sorted(found, key=lambda e: e.started_at)

    async def close(self) -> None:
        self.closed = True
