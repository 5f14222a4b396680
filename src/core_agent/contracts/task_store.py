"""Port for durable sessions, tasks and task events."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from shared.agent_protocol import TaskEvent, TaskState, TaskStatus, TokenUsage


class ITaskStore(abc.ABC):
    """Persists tasks and their event log so they survive a crash or restart.

    Every write is atomic: a status change and the event that announces it are committed
    together or not at all. Implementations may block on disk I/O but must do so off the
    event loop (all methods are awaitable). Storage failures raise ``StorageError``.
    """

    @abc.abstractmethod
    async def create_task(self, task: TaskState, queued_event: TaskEvent) -> None:
        """Insert a new task (and its session if new) together with its first event.

        Raises:
            StorageError: Nothing was written.
        """

    @abc.abstractmethod
    async def get_task(self, task_id: str) -> TaskState:
        """Return the stored task.

        Raises:
            TaskNotFoundError: No such task.
        """

    @abc.abstractmethod
    async def list_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        limit: int = 50,
    ) -> list[TaskState]:
        """Tasks, newest first, optionally filtered by session and status."""

    @abc.abstractmethod
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
        """Move a task from ``from_status`` to ``to_status`` and append ``event``, atomically.

        The store checks that the task is still in ``from_status`` (compare-and-set), so two
        writers can never both move the same task.

        Raises:
            TaskNotFoundError: No such task.
            InvalidTransitionError: The task is no longer in ``from_status``.
            StorageError: Nothing was written.
        """

    @abc.abstractmethod
    async def append_event(self, event: TaskEvent) -> None:
        """Append one event (it carries ``task_id`` and ``seq``) to its task's log.

        A ``task.tainted`` event also sets the task's ``tainted`` flag, in the same write
        (here and when ``transition`` carries one).

        Raises:
            StorageError: Nothing was written.
        """

    @abc.abstractmethod
    async def list_events(self, task_id: str) -> Sequence[TaskEvent]:
        """The task's persisted events in ``seq`` order, as protocol event models."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
