"""Port for durable sessions, tasks and task events."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime

from shared.agent_protocol import TaskEvent, TaskState, TaskStatus, TokenUsage


class ITaskStore(abc.ABC):
    """Persists tasks and their event log so they survive a crash or restart.

    Every write is atomic: a status change and the event that announces it are committed
    together or not at all. Implementations may block on disk I/O but must do so off the
    event loop (all methods are awaitable). Storage failures raise ``StorageError``.

    A running task has an owner (a kernel, by its ``owner`` string) and a lease: the owner
    renews it while the task runs, and a task whose lease ran out belongs to nobody, so
    another kernel may take it over (``acquire_lease``) and resume it.
    """

    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """Group the writes of one step and commit them together when the block ends.

        Events appended inside are held back, and so are the writes of stores sharing this
        store's database (spans, checkpoints, messages). Status moves (``transition``) and
        lease changes are never held back. The writes are committed when the block ends,
        also when it raises; ``after_commit`` callbacks run after. This default commits every
        write at once (no grouping).
        """
        yield

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """Queue ``callback`` for after the open unit of work commits.

        Returns ``False`` when none is open (the caller runs it at once). This default never
        queues.
        """
        return False

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
        """The task's persisted events in ``seq`` order, as protocol event models.

        Raises:
            CorruptStateError: A stored event cannot be read (this task only).
        """

    @abc.abstractmethod
    async def acquire_lease(self, task_id: str, *, owner: str, until: datetime) -> bool:
        """Make ``owner`` the task's owner until ``until``, if nobody else holds it now.

        It succeeds when the task has no owner, when ``owner`` already owns it, or when the
        current owner's lease ended before now; otherwise nothing changes.

        Returns:
            Whether ``owner`` holds the lease now.

        Raises:
            TaskNotFoundError: No such task.
        """

    @abc.abstractmethod
    async def renew_leases(
        self, owner: str, task_ids: Sequence[str], *, until: datetime
    ) -> set[str]:
        """Extend ``owner``'s leases on ``task_ids`` to ``until``.

        Returns:
            The ids whose lease ``owner`` still held (and now extended); a missing id was
            taken over by another kernel, which must stop running it here.
        """

    @abc.abstractmethod
    async def release_lease(self, task_id: str, *, owner: str) -> None:
        """Give up ``owner``'s lease on the task (no-op if it does not hold it)."""

    @abc.abstractmethod
    async def orphaned_tasks(self, *, now: datetime, limit: int = 100) -> list[TaskState]:
        """Tasks that are ``queued`` or ``running`` with no live lease, oldest first.

        Their owner died (or never recorded one); they can be resumed or failed.
        """

    @abc.abstractmethod
    async def request_cancel(self, task_id: str, reason: str) -> None:
        """Ask the task's owner to cancel it; the owner carries it out (``cancel_requests``).

        Raises:
            TaskNotFoundError: No such task.
        """

    @abc.abstractmethod
    async def cancel_requests(self, task_ids: Sequence[str]) -> dict[str, str]:
        """The tasks among ``task_ids`` whose cancellation was requested, with the reasons."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
