"""Store wrappers that redact secrets on the way in (see ``redaction``).

The container wraps the task, trace, checkpoint and memory stores with these, so no adapter
needs to know about secrets and a third-party store gets the same protection. Reads pass
through: what was written is already clean.

A suspended call whose arguments held a secret is stored redacted; when it is resumed from
the store its arguments no longer hash to what the human approved, so it is refused rather
than run with the placeholder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem, MemoryScope
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore, Span
from core_agent.safety.redaction import Redactor
from shared.agent_protocol import TaskEvent, TaskState, TaskStatus, TokenUsage


class RedactingTaskStore(ITaskStore):
    """Redacts tasks (request, output, error) and events before they are stored."""

    def __init__(self, inner: ITaskStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def create_task(self, task: TaskState, queued_event: TaskEvent) -> None:
        """See ``ITaskStore.create_task``."""
        await self._inner.create_task(
            self._redactor.model(task), self._redactor.model(queued_event)
        )

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
        )

    async def append_event(self, event: TaskEvent) -> None:
        """See ``ITaskStore.append_event``."""
        await self._inner.append_event(self._redactor.model(event))

    async def list_events(self, task_id: str) -> Sequence[TaskEvent]:
        """See ``ITaskStore.list_events``."""
        return await self._inner.list_events(task_id)

    async def close(self) -> None:
        """See ``ITaskStore.close``."""
        await self._inner.close()


class RedactingTraceStore(ITraceStore):
    """Redacts span names, errors and attributes before they are stored."""

    def __init__(self, inner: ITraceStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def record(self, span: Span) -> None:
        """See ``ITraceStore.record``."""
        redact = self._redactor
        await self._inner.record(
            dataclasses.replace(
                span,
                name=redact.text(span.name),
                error=redact.text(span.error) if span.error is not None else None,
                attributes=redact.data(span.attributes),
            )
        )

    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """See ``ITraceStore.list_spans``."""
        return await self._inner.list_spans(task_id=task_id, trace_id=trace_id)

    async def close(self) -> None:
        """See ``ITraceStore.close``."""
        await self._inner.close()


class RedactingCheckpointStore(ICheckpointStore):
    """Redacts checkpoint states before they are stored."""

    def __init__(self, inner: ICheckpointStore, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def save(self, task_id: str, key: str, state: dict[str, Any]) -> None:
        """See ``ICheckpointStore.save``."""
        await self._inner.save(task_id, key, self._redactor.data(state))

    async def load(self, task_id: str, key: str) -> dict[str, Any] | None:
        """See ``ICheckpointStore.load``."""
        return await self._inner.load(task_id, key)

    async def list_keys(self, task_id: str) -> list[str]:
        """See ``ICheckpointStore.list_keys``."""
        return await self._inner.list_keys(task_id)

    async def close(self) -> None:
        """See ``ICheckpointStore.close``."""
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
