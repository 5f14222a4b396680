"""In-memory fakes of the stores, recording what happened, for unit tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from pydantic import BaseModel

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.errors import (
    InvalidTransitionError,
    StorageError,
    TaskNotFoundError,
    UsageError,
)
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore, Span
from shared.agent_protocol import TaskState, TaskStatus, TokenUsage


class FakeTaskStore(ITaskStore):
    def __init__(self) -> None:
        self.tasks: dict[str, TaskState] = {}
        self.events: dict[str, list[BaseModel]] = {}
        self.closed = False

    async def create_task(self, task: TaskState, queued_event: BaseModel) -> None:
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

    async def append_event(self, event: BaseModel) -> None:
        self._record(event)

    def _record(self, event: BaseModel) -> None:
        task_id = event.task_id  # type: ignore[attr-defined]
        self.events[task_id].append(event)
        if getattr(event, "kind", "") == "task.tainted":
            self.tasks[task_id] = self.tasks[task_id].model_copy(update={"tainted": True})

    async def list_events(self, task_id: str) -> Sequence[BaseModel]:
        return list(self.events.get(task_id, []))

    async def close(self) -> None:
        self.closed = True


class FakeTraceStore(ITraceStore):
    def __init__(self, *, fail_on_kind: str | None = None) -> None:
        self.spans: list[Span] = []
        self.fail_on_kind = fail_on_kind
        self.closed = False

    async def record(self, span: Span) -> None:
        if span.kind == self.fail_on_kind:
            raise StorageError(f"trace store refused a {span.kind} span")
        self.spans.append(replace(span))

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

    async def close(self) -> None:
        self.closed = True


class FakeCheckpointStore(ICheckpointStore):
    def __init__(self) -> None:
        self.saved: dict[tuple[str, str], dict] = {}
        self.history: list[tuple[str, str, dict]] = []
        self.closed = False

    async def save(self, task_id: str, key: str, state: dict) -> None:
        snapshot = json.loads(json.dumps(state))  # what a real store would keep
        self.saved[(task_id, key)] = snapshot
        self.history.append((task_id, key, snapshot))

    async def load(self, task_id: str, key: str) -> dict | None:
        return self.saved.get((task_id, key))

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
