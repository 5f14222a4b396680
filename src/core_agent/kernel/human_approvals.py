"""Asking a connected human about a running task's risky calls, and reading decisions back.

``HumanApprovals`` is what an executor's ``HumanChannel.request_approval`` is when the host
connected an approver: the task waits in ``waiting_approval`` (still held by this kernel, so
nobody else decides) while the approver is asked, and each decision is recorded as the
request's one decision before the run acts on it. The functions below read a task's event
log for the requests and decisions it holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
import anyio.lowlevel
from pydantic import BaseModel

from core_agent.contracts.errors import InvalidTransitionError, TaskHeldError, UsageError
from core_agent.contracts.task_store import ApprovalDecided
from core_agent.kernel.task_lifecycle import TaskLifecycle
from core_agent.safety.approval_gateway import denial
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    TaskStatus,
    TaskWaitingApproval,
)

AskHuman = Callable[[ApprovalRequest], Awaitable[ApprovalDecision | None]]
"""The host's approver: its decision, or ``None`` when nobody can be asked now."""


class HumanApprovals:
    """The ``ApprovalRequester`` of one running task whose host connected an approver.

    Several calls of one turn may wait at once: the task is ``waiting_approval`` while any
    does, and each decision is matched to its own request by id. ``left_alone()`` says the
    run is being stopped to be carried on by another kernel (its kernel closes): then no
    decision is recorded, so the request stays open for a human. ``on_lost`` is called when
    the request was decided elsewhere, or the task ended meanwhile: the run must stop.
    """

    def __init__(
        self,
        lifecycle: TaskLifecycle,
        ask: AskHuman,
        *,
        flush: Callable[[], Awaitable[None]],
        left_alone: Callable[[], bool],
        on_lost: Callable[[], None],
    ) -> None:
        self._lifecycle = lifecycle
        self._ask_human = ask
        self._flush = flush
        self._left_alone = left_alone
        self._on_lost = on_lost
        self._waiting = 0
        self._lock = anyio.Lock()

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask about ``request`` and return the decision this run may act on."""
        lifecycle = self._lifecycle
        await lifecycle.events(ApprovalRequested, request=request)
        # The request must be stored before anyone can decide it (the step's unit of work
        # may be holding it back).
        await self._flush()
        async with self._lock:
            self._waiting += 1
            if self._waiting == 1:
                try:
                    await lifecycle.move(
                        TaskStatus.RUNNING,
                        TaskStatus.WAITING_APPROVAL,
                        lifecycle.events.make(TaskWaitingApproval, request_id=request.request_id),
                    )
                except InvalidTransitionError as exc:
                    # Still waiting: a parallel call's decision came while this request
                    # was being recorded, so the task was never moved back.
                    if exc.current != TaskStatus.WAITING_APPROVAL.value:
                        raise
        decision = denial(request, "the wait was interrupted")
        decided: ApprovalDecided | None = None
        left_alone = False
        try:
            decision = await self._ask(request)
        finally:
            # Recorded even when the run is canceled while it waits.
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    self._waiting -= 1
                    left_alone = self._left_alone()
                    if not left_alone:
                        decided = await self._record(decision)
        if decided is None:
            if not left_alone:
                self._on_lost()
                # The run is cancelled now: it stops here, before acting on any answer.
                await anyio.lowlevel.checkpoint()
            # This run must not act on an answer that is not the recorded one.
            return denial(request, "the request was decided elsewhere")
        return decision

    async def _record(self, decision: ApprovalDecision) -> ApprovalDecided | None:
        """Record the decision; the last open request's moves the task back to running."""
        try:
            return await self._lifecycle.decide(decision, then=TaskStatus.RUNNING)
        except (InvalidTransitionError, TaskHeldError):
            return None

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        answer = await self._ask_human(request)
        return answer if answer is not None else denial(request, "no approver answered")


def already_decided(request_id: str, decision: ApprovalDecision | None) -> UsageError:
    """The error for a second decision on ``request_id``, naming the first one."""
    if decision is None:
        return UsageError(f"approval request {request_id!r} was already decided")
    verdict = "approved" if decision.approved else "denied"
    who = decision.decided_by or "someone"
    return UsageError(f"approval request {request_id!r} was already {verdict} by {who}")


def open_requests(events: Sequence[BaseModel]) -> list[ApprovalRequest]:
    """The approval requests in a task's log that have no decision yet, oldest first."""
    pending: dict[str, ApprovalRequest] = {}
    for event in events:
        if isinstance(event, ApprovalRequested):
            pending[event.request.request_id] = event.request
        elif isinstance(event, ApprovalResolved):
            pending.pop(event.decision.request_id, None)
    return list(pending.values())


def recorded_decisions(events: Sequence[BaseModel]) -> dict[str, ApprovalDecision]:
    """Every decision recorded in a task's log, by request id."""
    return {e.decision.request_id: e.decision for e in events if isinstance(e, ApprovalResolved)}
