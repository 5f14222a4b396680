"""One task's event log as the kernel writes it: numbered, persisted, then published."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from core_agent.contracts.event_bus import IEventBus
from core_agent.contracts.task_store import ITaskStore
from shared.agent_protocol import EPHEMERAL_EVENT_KINDS, TaskEvent


def now() -> datetime:
    """The current time, as every kernel record stores it (UTC)."""
    return datetime.now(UTC)


class TaskEventLog:
    """Numbers, persists and publishes one task's events, in order.

    Calling it (the executors' ``EventSink``) persists an event, within the open unit of work
    if there is one, and publishes it once it is durable. ``make`` only numbers one, for a
    store call that writes it together with a status move.
    """

    def __init__(
        self, task_store: ITaskStore, event_bus: IEventBus, task_id: str, next_seq: int = 1
    ) -> None:
        self._task_store = task_store
        self._event_bus = event_bus
        self.task_id = task_id
        self._seq = next_seq

    @classmethod
    def continued(
        cls,
        task_store: ITaskStore,
        event_bus: IEventBus,
        task_id: str,
        persisted: Sequence[TaskEvent],
    ) -> TaskEventLog:
        """The log of a task that already has ``persisted`` events: numbering goes on after."""
        next_seq = max((event.seq for event in persisted), default=0) + 1
        return cls(task_store, event_bus, task_id, next_seq)

    def make(self, event_type: type[TaskEvent], /, **fields: Any) -> TaskEvent:
        """The next event of the task, numbered but neither stored nor published."""
        event = event_type(
            # Unique, not secret (like span ids): without the system call uuid4 makes.
            event_id=f"{random.getrandbits(128):032x}",
            task_id=self.task_id,
            seq=self._seq,
            occurred_at=now(),
            **fields,
        )
        self._seq += 1
        return event

    def follow(self, stored: TaskEvent) -> None:
        """Number the next events after ``stored``, which the store numbered itself."""
        self._seq = max(self._seq, stored.seq + 1)

    async def publish(self, event: TaskEvent) -> None:
        """Tell subscribers of ``event``, which is already stored (or ephemeral)."""
        await self._event_bus.publish(event)

    async def __call__(self, event_type: type[TaskEvent], /, **fields: Any) -> None:
        """Record the next event of the task and publish it once it is durable."""
        event = self.make(event_type, **fields)
        if event.kind in EPHEMERAL_EVENT_KINDS:
            await self._event_bus.publish(event)
            return
        await self._task_store.append_event(event)

        async def publish() -> None:
            await self._event_bus.publish(event)

        # Subscribers hear of an event once it is durable (after the step's unit of work).
        if not self._task_store.after_commit(publish):
            await publish()
