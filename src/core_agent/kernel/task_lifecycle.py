"""How one task moves between states and ends: every move a stored transition with its event.

The executors never move a task: they return an outcome or raise, and the kernel's driver
(``task_driver``) turns that into one of the moves here. Each move is checked against the
state machine, written by the task store together with its event (and the task's usage,
output or error), and published once stored. A move the store refuses because someone else
moved the task first (a cancel from another process, a kernel that took it over) is not an
error for the host: the task's stored ending is reported instead.

The move that ends a task also writes the root span of its trace (``task_span``): from the
task's creation to its end, with its status and usage, and what the kernel adds to an ending
(``on_end``: the session's turn). They follow the move (``ITaskStore.transition``'s
``then``): stored in its transaction, after it, only if it is, so only the kernel whose move
was stored writes them, and a crash cannot leave a task ended without its turn. The start
likewise takes its route along (``start``'s ``then``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from core_agent.contracts.errors import CoreAgentError, InvalidTransitionError
from core_agent.contracts.executor import ExecutionOutcome, RunStats
from core_agent.contracts.task_store import ApprovalDecided, ITaskStore
from core_agent.contracts.trace_store import ITraceStore
from core_agent.kernel.state_machine import check_transition
from core_agent.kernel.task_events import TaskEventLog
from core_agent.kernel.task_lease import lease_until
from core_agent.observability.tracer import Tracer
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    TaskCanceled,
    TaskEvent,
    TaskFailed,
    TaskResult,
    TaskStarted,
    TaskState,
    TaskStatus,
    TaskSucceeded,
    TaskWaitingApproval,
    TokenUsage,
)

log = logging.getLogger(__name__)


async def task_span(
    trace_store: ITraceStore,
    state: TaskState,
    status: TaskStatus,
    usage: TokenUsage,
    *,
    strategy: str | None = None,
    error: str | None = None,
) -> None:
    """Write the root span of ``state``'s trace, now that the task ended ``status``.

    A failed write is logged, not raised: the task has ended, and its ending stands.
    """
    try:
        await Tracer.of(trace_store, state).end_task(
            started_at=state.created_at,
            status=status.value,
            usage=usage,
            strategy=strategy or state.strategy,
            error=error,
            failed=status is TaskStatus.FAILED,
        )
    except CoreAgentError as exc:
        log.warning("task %s ended, but its root span was not written: %s", state.task_id, exc)


class TaskLifecycle:
    """The moves of one task, made by the kernel ``owner`` that runs it."""

    def __init__(
        self,
        *,
        task_store: ITaskStore,
        events: TaskEventLog,
        state: TaskState,
        owner: str,
        lease_s: float,
        trace_store: ITraceStore | None = None,
    ) -> None:
        self._task_store = task_store
        self._trace_store = trace_store
        self.events = events
        self.state = state
        """The task as it was when this kernel took it (identity, request, strategy)."""
        self.owner = owner
        self._lease_s = lease_s
        self._strategy: str | None = state.strategy
        self.on_end: Callable[[TaskResult], Awaitable[None]] | None = None
        """What else an ending move of this kernel writes with it (the session's turn)."""
        self.ended_here = False
        """Whether an ending move (with ``on_end``) was stored by this lifecycle."""

    @property
    def task_id(self) -> str:
        """The task's id."""
        return self.state.task_id

    async def move(
        self,
        current: TaskStatus,
        target: TaskStatus,
        event: TaskEvent,
        *,
        then: Callable[[], Awaitable[None]] | None = None,
        **fields: Any,
    ) -> None:
        """Move the task from ``current`` to ``target``, storing ``event`` and ``fields``.

        An ending move writes the task's root span with it; ``then`` writes what else follows
        from the move, stored with it (see the module).

        Raises:
            InvalidTransitionError: The move is not allowed, or the stored task is no longer
                ``current`` (someone else moved it).
        """
        check_transition(self.task_id, current, target)

        async def publish() -> None:
            await self.events.publish(event)

        async def follow() -> None:
            # Heard of once stored, before anything written after it.
            if not self._task_store.after_commit(publish):
                await publish()
            if target.is_terminal:
                await self._ended(target, fields.get("usage"), fields.get("error"))
            if then is not None:
                await then()

        await self._task_store.transition(
            self.task_id, from_status=current, to_status=target, event=event, then=follow, **fields
        )

    async def start(
        self, strategy: str, *, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """``queued`` to ``running`` with the strategy the task runs with.

        ``then`` writes what goes with the start (the route the task takes): its writes
        commit with the move.
        """
        self._strategy = strategy
        await self.move(
            TaskStatus.QUEUED,
            TaskStatus.RUNNING,
            self.events.make(TaskStarted),
            then=then,
            strategy=strategy,
        )

    async def _end(
        self,
        current: TaskStatus,
        event: TaskEvent,
        result: TaskResult,
        stats: RunStats,
        **fields: Any,
    ) -> TaskResult:
        """Move the task to ``result.status`` with ``on_end``; the stored result if refused."""
        on_end = self.on_end

        async def then() -> None:
            if on_end is not None:
                await on_end(result)

        try:
            await self.move(current, result.status, event, then=then, **fields)
        except InvalidTransitionError:
            return await self.stored_result(stats)
        self.ended_here = on_end is not None
        return result

    async def _ended(self, status: TaskStatus, usage: Any, error: Any) -> None:
        """Write the task's root span (see the module)."""
        if self._trace_store is None:
            return
        await task_span(
            self._trace_store,
            self.state,
            status,
            usage if isinstance(usage, TokenUsage) else self.state.usage,
            strategy=self._strategy,
            error=error if isinstance(error, str) else None,
        )

    async def succeed(self, outcome: ExecutionOutcome, stats: RunStats) -> TaskResult:
        """End the running task with its answer."""
        usage = stats.usage
        return await self._end(
            TaskStatus.RUNNING,
            self.events.make(TaskSucceeded, output=outcome.output, usage=usage),
            self.result(
                TaskStatus.SUCCEEDED, stats, output=outcome.output, structured=outcome.structured
            ),
            stats,
            output=outcome.output,
            usage=usage,
        )

    async def fail(
        self,
        error: str,
        error_type: str,
        stats: RunStats,
        *,
        current: TaskStatus = TaskStatus.RUNNING,
    ) -> TaskResult:
        """End the task ``failed`` with ``error`` (``error_type`` names its kind)."""
        usage = stats.usage
        return await self._end(
            current,
            self.events.make(TaskFailed, error=error, error_type=error_type, usage=usage),
            self.result(TaskStatus.FAILED, stats, error=error, error_type=error_type),
            stats,
            error=error,
            usage=usage,
        )

    async def cancel(
        self, reason: str, stats: RunStats, *, current: TaskStatus = TaskStatus.RUNNING
    ) -> TaskResult:
        """End the task ``canceled`` with ``reason``."""
        usage = stats.usage
        return await self._end(
            current,
            self.events.make(TaskCanceled, reason=reason, usage=usage),
            self.result(TaskStatus.CANCELED, stats, error=reason),
            stats,
            error=reason,
            usage=usage,
        )

    async def wait_for(
        self, requests: Sequence[ApprovalRequest], stats: RunStats, *, error: str
    ) -> TaskResult:
        """Record ``requests`` and move the running task to ``waiting_approval``.

        The lease is kept: call ``release`` unless this kernel asks a human itself.
        """
        for request in requests:
            await self.events(ApprovalRequested, request=request)
        first = requests[0].request_id
        await self.move(
            TaskStatus.RUNNING,
            TaskStatus.WAITING_APPROVAL,
            self.events.make(TaskWaitingApproval, request_id=first),
            usage=stats.usage,
        )
        return self.result(TaskStatus.WAITING_APPROVAL, stats, error=error, pending_approval=first)

    async def decide(
        self,
        decision: ApprovalDecision,
        *,
        then: TaskStatus,
        error: str | None = None,
        error_type: str = "ApprovalDenied",
        follow: Callable[[], Awaitable[None]] | None = None,
    ) -> ApprovalDecided | None:
        """Record a human's ``decision`` once (``ITaskStore.decide_approval``) and publish it.

        When it is the task's last open request the task moves to ``then``, held by this
        kernel when that is ``running``. A decision that ends the task (``failed`` with
        ``error`` of ``error_type``, or ``canceled``) stores with it, in its transaction, the
        ending's event, the task's root span and what ``follow`` writes (the session's turn).
        ``None`` when the request was already decided.

        Raises:
            InvalidTransitionError: The task no longer waits for a decision.
            TaskHeldError: The task's live host is asking its own approver about it.
        """
        resolved = self.events.make(ApprovalResolved, decision=decision)
        usage = self.state.usage
        ending: TaskEvent | None = None
        if then is TaskStatus.FAILED:
            error = error or "a human declined"
            ending = self.events.make(TaskFailed, error=error, error_type=error_type, usage=usage)
        elif then is TaskStatus.CANCELED:
            error = error or "a human canceled the task"
            ending = self.events.make(TaskCanceled, reason=error, usage=usage)

        async def ended() -> None:
            # Bookkeeping of a decision that is taken anyway: its failure is logged, so the
            # stored decision and ending are still heard of.
            try:
                await self._ended(then, usage, error)
                if follow is not None:
                    await follow()
            except Exception:
                log.exception("task %s: what follows its decision failed", self.task_id)

        # Shielded: a decision stored is heard of, whatever happens to the caller meanwhile.
        with anyio.CancelScope(shield=True):
            decided = await self._task_store.decide_approval(
                resolved,
                then=then,
                owner=self.owner,
                lease_until=lease_until(self._lease_s),
                error=error,
                ending=ending,
                follow=ended if then.is_terminal else None,
            )
            if decided is not None:
                self.events.follow(decided.event)
                await self.events.publish(decided.event)
                if decided.ended is not None:
                    self.events.follow(decided.ended)
                    await self.events.publish(decided.ended)
        return decided

    async def release(self) -> None:
        """Give up the task's lease: another kernel may carry it on (or a human's answer)."""
        await self._task_store.release_lease(self.task_id, owner=self.owner)

    async def stored_result(self, stats: RunStats) -> TaskResult:
        """The result as the store has it (the task was ended or taken over elsewhere)."""
        stored = await self._task_store.get_task(self.task_id)
        error = stored.error
        if stored.status is TaskStatus.RUNNING and stored.owner != self.owner:
            error = f"another kernel ({stored.owner}) took this task over and runs it"
        return self.result(stored.status, stats, output=stored.output, error=error)

    def result(
        self,
        status: TaskStatus,
        stats: RunStats,
        *,
        output: str | None = None,
        error: str | None = None,
        error_type: str | None = None,
        structured: dict[str, Any] | None = None,
        pending_approval: str | None = None,
    ) -> TaskResult:
        """What the host gets back for this task in ``status``."""
        state = self.state
        return TaskResult(
            task_id=state.task_id,
            session_id=state.session_id,
            trace_id=state.trace_id,
            status=status,
            output=output,
            error=error,
            error_type=error_type,
            usage=stats.usage,
            turns=stats.turns,
            structured_output=structured,
            pending_approval=pending_approval,
        )
