"""Port for durable sessions, tasks and task events."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from core_agent.contracts.errors import CorruptStateError, InvalidTransitionError, TaskHeldError
from core_agent.contracts.metrics import MetricsScope, TaskMetrics
from core_agent.contracts.session_store import ISessionStore
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    TaskEvent,
    TaskState,
    TaskStatus,
    TokenUsage,
)


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approval request and, once a human answered, the decision."""

    request: ApprovalRequest
    decision: ApprovalDecision | None = None


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of a task listing, newest first (see ``ITaskStore.page_tasks``).

    Attributes:
        tasks: The tasks of this page.
        next_cursor: Pass it as ``cursor`` for the next (older) page; ``None`` on the last.
    """

    tasks: list[TaskState]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """What ``decide_approval`` recorded.

    Attributes:
        event: The ``approval.resolved`` event as stored (with the ``seq`` it got).
        still_open: Requests of the task that still wait for a decision; at 0 the task was
            moved out of ``waiting_approval``.
        ended: The ``ending`` event as stored, when the decision moved the task with one.
    """

    event: TaskEvent
    still_open: int
    ended: TaskEvent | None = None


class ITaskStore(abc.ABC):
    """Persists tasks and their event log so they survive a crash or restart.

    Every write is atomic: a status change and the event that announces it are committed
    together or not at all. Implementations may block on disk I/O but must do so off the
    event loop (all methods are awaitable). Storage failures raise ``StorageError``.

    A running task has an owner (a kernel, by its ``owner`` string) and a lease: the owner
    renews it while the task runs, and a task whose lease ran out belongs to nobody, so
    another kernel may take it over (``acquire_lease``) and resume it. A task waiting for a
    human keeps its owner while that owner's host is asking its own approver, and has none
    while it waits durably (anyone may then decide, ``decide_approval``).
    """

    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """Group the writes of one step and commit them together when the block ends.

        Events appended inside are held back, and so are the writes of stores sharing this
        store's database (spans, checkpoints, messages). Status moves (``transition``) and
        lease changes are never held back (a move commits with what is held so far). The
        writes are committed when the block ends, also when it raises; ``after_commit``
        callbacks run after. This default commits every write at once (no grouping).
        """
        yield

    @contextlib.asynccontextmanager
    async def all_or_nothing(self) -> AsyncIterator[None]:
        """A unit of work whose writes are all stored when the block ends, or none if it raises.

        For records made elsewhere, stored whole or not at all (an import): unlike
        ``unit_of_work``, whose writes happened and are kept, a block that raises here (a
        record that fails to be prepared or written) leaves nothing behind. Only held-back
        writes belong inside (events, inserted tasks, spans of stores sharing this store's
        database), no status moves. Inside an open unit of work the writes join it once the
        block has ended without error. This default commits every write at once, so a block
        that raises may leave part of its writes: stores that can hold writes back should
        override it.
        """
        async with self.unit_of_work():
            yield

    async def flush(self) -> None:
        """Commit what the open unit of work holds so far; the unit stays open for more.

        Its ``after_commit`` callbacks so far run once the writes are durable. Called before
        the run waits on something slow or outside (a tool, a human), so what happened until
        then is durable and observers hear of it. This default holds nothing back, so it has
        nothing to do.
        """
        return None

    def fenced(self, task_id: str, owner: str) -> contextlib.AbstractContextManager[None]:
        """A block whose writes are stored only while ``owner`` holds the task's lease.

        A process that stalled past its lease (a laptop asleep, a debugger, SIGSTOP) wakes to
        find another kernel running, or having ended, its task: what it still writes for the
        task (a step's records, a late tool result) must not land over the new owner's.
        Inside the block every transaction first checks the task's owner in the same
        transaction; when it is another, nothing of that transaction is stored and it raises
        ``LeaseLostError``. This default checks nothing.
        """
        return contextlib.nullcontext()

    def independent_work(self) -> contextlib.AbstractContextManager[None]:
        """A block whose writes do not join the unit of work open around it.

        For a task that runs inside another's step (a nested agent called as a tool): its
        steps commit in units of their own, so its events are durable and published as it
        goes, not when the caller's step ends. A synchronous block, entered in the task that
        runs the nested work. This default holds nothing back, so it changes nothing.
        """
        return contextlib.nullcontext()

    def hand_over(self) -> bool:
        """Leave what the open unit of work holds to the unit ``independent_work`` hid.

        For the step that ends a run (a model's final answer): its records commit in the
        run's next commit, its ending's, rather than in one of their own a moment before.
        They keep the fence in force here (``fenced``): when its check fails as they are
        applied, they are left out, and their ``after_commit`` callbacks never run, while
        the rest of that transaction commits. When one of them cannot be stored, that commit
        fails with the error (``StorageError``) once, and they are left out of the unit's
        later commits (the one that records the failure). What the block writes after this
        stays in it.
        Returns whether anything was handed over: ``False`` when no unit is open here or
        none was hidden (the block then commits its writes itself). This default holds
        nothing back, so it hands nothing over.
        """
        return False

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """Queue ``callback`` for after the open unit of work commits.

        Returns ``False`` when none is open (the caller runs it at once). This default never
        queues.
        """
        return False

    @abc.abstractmethod
    async def create_task(
        self,
        task: TaskState,
        queued_event: TaskEvent,
        *,
        exclusive: bool = False,
        supersede_turn: int | None = None,
    ) -> None:
        """Insert a new task (and its session if new) together with its first event.

        With ``exclusive``, the session runs one task at a time: the check and the insert
        are one atomic step, so of two kernels submitting to one session at once only one
        gets in.

        With ``supersede_turn`` (a retry; use with ``exclusive``), that turn of the task's
        session and every live turn after it, with the summaries covering them, are marked
        superseded by the task in the same atomic step: no later task's history holds them.
        A turn superseded by a retry that added no turn of its own is taken over too (from
        ``supersede_turn`` on), so a canceled retry can be retried again.

        Inside an open unit of work, an ``exclusive`` creation stores what the unit holds so
        far first, in the same atomic step (as ``flush`` would, a commit sooner); any other
        joins the unit, like an event: a child task created inside its parent's step commits
        with the parent's record of handing it over, and with its own start.

        Raises:
            SessionBusyError: With ``exclusive``, another task of the session is queued,
                running or waiting for a human (nothing was written).
            SessionClosedError: With ``exclusive``, the session was closed.
            UsageError: With ``supersede_turn``, the session has no such live turn, or the
                store keeps no session history (nothing was written).
            StorageError: Nothing was written.
        """

    async def insert_task(self, task: TaskState, events: Sequence[TaskEvent]) -> None:
        """Insert ``task`` as it is, with its whole event log ``events`` (ids kept).

        For records made elsewhere: a task imported from an export, or the copy a fork starts
        from. ``events`` are in ``seq`` order and the first is the task's ``task.queued``.
        Inside a unit of work the writes join it, so they commit with the others (spans, a
        checkpoint); inside ``all_or_nothing``, not at all if the block raises.

        Raises:
            StorageError: Nothing was written (for instance, the task's id, or an event's, is
                taken).

        This default creates the task with its first event, then appends the others: a
        failure may leave part of the log. Stores that can do it in one transaction should.
        """
        await self.create_task(task, events[0])
        for event in events[1:]:
            await self.append_event(event)

    def session_store(self) -> ISessionStore | None:
        """The store of this backend's sessions (history, summaries), on the same data.

        The caller closes it. ``None`` (this default) when the backend keeps no session
        history: sessions are then only ids that group tasks.
        """
        return None

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
        """Tasks, newest first, optionally filtered by session and status.

        A task whose stored state cannot be read is left out (and logged), here and in
        ``page_tasks`` and ``orphaned_tasks``: one damaged task must not hide the others
        (``get_task`` raises ``CorruptStateError`` for it).
        """

    @abc.abstractmethod
    async def page_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        text: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> TaskPage:
        """One page of tasks, newest first, for browsing many (the trace viewer's list).

        Filtered by session and status when given, and by ``text``: the tasks whose request
        text or output contains it (ASCII letters in either case). ``cursor`` is the
        ``next_cursor`` of the page before, an opaque string this store made: the next page
        starts after the last task of that one (keyset pagination), so a page deep in the list
        costs what the first does, and tasks added meanwhile do not shift it.

        Raises:
            UsageError: ``cursor`` is not one this store made.
        """

    @abc.abstractmethod
    async def match_task_ids(self, reference: str, *, limit: int = 10) -> list[str]:
        """Ids of the tasks a person may mean by ``reference``, at most ``limit``.

        A task whose id starts with ``reference`` (a whole id or a prefix of one), or, when
        no id does, whose trace id is ``reference``. Empty when nothing matches; more than
        one when a prefix is ambiguous. Never raises for a reference that matches nothing.
        """

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
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Move a task from ``from_status`` to ``to_status`` and append ``event``, atomically.

        The store checks that the task is still in ``from_status`` (compare-and-set), so two
        writers can never both move the same task. Inside a unit of work the move is not held
        back: it commits at once, together with what the unit holds so far.

        ``then`` is what follows from the move (the writes of a task's start before its first
        step, the root span and session turn of its end): what it writes is stored with the
        move, after it, only if the move is, and its ``after_commit`` callbacks run once that
        is durable. A write of it that fails is logged and left out; the move stands. If
        ``then`` raises, the move and what it wrote so far are stored, then the error
        propagates. A store may run ``then`` before it knows whether the move will succeed
        (what it writes waits for the move); it awaits it once unless the move fails first.

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

    async def pending_approvals(self, *, limit: int = 1000) -> list[ApprovalRequest]:
        """Requests that wait for a human, oldest first, across tasks.

        A store should answer from an index of requests (SQLite: ``agent_approvals``), so a
        damaged task cannot hide the others'. This default reads the logs of waiting tasks and
        skips the ones it cannot read.
        """
        pending: list[ApprovalRequest] = []
        for state in await self.list_tasks(status=TaskStatus.WAITING_APPROVAL, limit=limit):
            try:
                pending.extend(
                    r.request for r in await self._records(state.task_id) if r.decision is None
                )
            except CorruptStateError:
                continue
        return sorted(pending, key=lambda r: r.created_at)[:limit]

    async def approval(self, request_id: str) -> ApprovalRecord | None:
        """The request ``request_id`` and its decision, if any; ``None`` if unknown.

        This default looks in the logs of waiting tasks only.
        """
        for state in await self.list_tasks(status=TaskStatus.WAITING_APPROVAL, limit=1000):
            for record in await self._records(state.task_id):
                if record.request.request_id == request_id:
                    return record
        return None

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
        """Record a human's decision on a pending request, once.

        ``resolved`` is the ``approval.resolved`` event carrying the decision; its ``seq`` is a
        hint, and the event is stored with the next free number of its task's log. Together,
        atomically: the request is marked decided, the event is appended, and when no request
        of the task is left open the task moves from ``waiting_approval`` to ``then`` (with
        ``error``; with ``owner`` holding it until ``lease_until`` when ``then`` is
        ``running``). So of two concurrent decisions on one request exactly one is recorded,
        and of decisions on two requests of one turn exactly one moves the task on.

        When the decision moves the task, ``ending`` (the move's own event, ``task.failed``
        for a question answered no) is appended right after ``resolved``, numbered after it,
        and what ``follow`` writes (the root span and session turn of a task that ends) is
        stored in the same transaction, after them, as ``transition``'s ``then``: a write of it
        that fails is logged and left out, its ``after_commit`` callbacks run once all is
        durable. When the decision does not move the task, neither is stored. ``follow`` may
        run before the store knows which; if it raises, what was decided stands and the error
        propagates.

        Returns ``None`` when the request is unknown or already decided (nothing is written).

        Raises:
            InvalidTransitionError: The task is no longer ``waiting_approval``.
            TaskHeldError: Another live process holds the task (it asks its own approver).

        This default is atomic only within one event loop; stores shared by processes must
        override it. It stores ``ending`` as one of ``transition``'s ``then`` writes, which that
        contract lets a store leave out: such a store must override it too.
        """
        assert isinstance(resolved, ApprovalResolved)
        state = await self.get_task(resolved.task_id)
        if state.status is not TaskStatus.WAITING_APPROVAL:
            raise InvalidTransitionError(state.task_id, state.status.value, then.value)
        if (
            state.owner not in (None, owner)
            and state.lease_expires_at is not None
            and state.lease_expires_at > datetime.now(UTC)
        ):
            raise TaskHeldError(state.task_id, state.owner or "", "it asks its own approver")
        records = await self._records(state.task_id)
        target = resolved.decision.request_id
        if not any(r.request.request_id == target and r.decision is None for r in records):
            return None
        events = await self.list_events(state.task_id)
        stored = resolved.model_copy(update={"seq": max((e.seq for e in events), default=0) + 1})
        still_open = sum(1 for r in records if r.decision is None) - 1
        if still_open:
            await self.append_event(stored)
            return ApprovalDecided(stored, still_open)
        ended = ending.model_copy(update={"seq": stored.seq + 1}) if ending else None

        async def then_writes() -> None:
            if ended is not None:
                await self.append_event(ended)
            if follow is not None:
                await follow()

        await self.transition(
            state.task_id,
            from_status=TaskStatus.WAITING_APPROVAL,
            to_status=then,
            event=stored,
            error=error,
            then=then_writes,
        )
        if then is TaskStatus.RUNNING and owner is not None and lease_until is not None:
            await self.acquire_lease(state.task_id, owner=owner, until=lease_until)
        return ApprovalDecided(stored, still_open, ended)

    async def _records(self, task_id: str) -> list[ApprovalRecord]:
        """The approval requests in a task's log, with their decisions, oldest first."""
        records: dict[str, ApprovalRecord] = {}
        for event in await self.list_events(task_id):
            if isinstance(event, ApprovalRequested):
                records[event.request.request_id] = ApprovalRecord(event.request)
            elif isinstance(event, ApprovalResolved):
                known = records.get(event.decision.request_id)
                if known is not None:
                    records[event.decision.request_id] = ApprovalRecord(
                        known.request, event.decision
                    )
        return list(records.values())

    @abc.abstractmethod
    async def task_metrics(self, scope: MetricsScope) -> TaskMetrics:
        """The tasks in ``scope`` by status, and what became of their approval requests.

        ``approvals`` classifies every request of those tasks as ``ApprovalMetrics`` says:
        approved or denied by a person; expired when the kernel denied it itself (its
        decision's ``decided_by`` is ``core-agent``: the approver timed out, failed or could
        not be asked) or when it has no decision and its task has ended; pending otherwise.
        ``wait`` is the time from each decided request's ``created_at`` to the event that
        recorded its decision, as nearest-rank percentiles.

        A task stored with a status this build does not know (a newer core-agent's) is
        counted in ``unknown_status`` by that status, not raised: the others still count.

        A store should compute this with aggregates over its indexes (tasks by creation time
        and by session), not by reading every task into the process; it may take a while
        on a large store, and must not block the event loop meanwhile.

        Raises:
            StorageError: The tasks cannot be read.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
