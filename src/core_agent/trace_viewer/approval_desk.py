"""Decisions given on the viewer's pages, carried out by the viewer's own kernel.

An approved call resumes its task in the viewer's process and runs it to its end, which can
take minutes: that run lives in the viewer's task group, not in the HTTP request, and the
page says how it goes (``Notice``). The request answers once the decision is recorded (or
refused), so the page that follows shows the task moving on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import anyio.abc

from core_agent.command_errors import explain
from core_agent.kernel.agent_kernel import AgentKernel
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, TaskStatus

log = logging.getLogger(__name__)

RECORD_WAIT_S = 10.0
"""How long a decision's request waits for the decision to be recorded before answering."""
_POLL_S = 0.05


@dataclass(slots=True)
class Notice:
    """What became of the last decision given here on a task's request.

    Attributes:
        request_id: The request decided.
        approved: Whether it was approved.
        running: The task carries on in this process (the run has not returned yet).
        status: How the run left the task, once it returned.
        error: Why the decision was refused or the run failed to start, if it was.
    """

    request_id: str
    approved: bool
    running: bool = True
    status: TaskStatus | None = None
    error: str | None = None


class ApprovalDesk:
    """Takes decisions from the pages and resumes their tasks in ``group``."""

    def __init__(self, kernel: AgentKernel, group: anyio.abc.TaskGroup) -> None:
        self._kernel = kernel
        self._group = group
        self._notices: dict[str, Notice] = {}

    def notice(self, task_id: str) -> Notice | None:
        """The last decision given here on one of the task's requests, and how it went."""
        return self._notices.get(task_id)

    async def decide(self, request: ApprovalRequest, *, approved: bool, reason: str) -> Notice:
        """Answer ``request`` and, once recorded (or after ``RECORD_WAIT_S``), return.

        The task goes on in the background; the returned notice carries an ``error`` when
        the kernel refused the decision (decided already, the task held by another process).
        """
        decision = ApprovalDecision(
            request_id=request.request_id,
            approved=approved,
            reason=reason,
            decided_by="trace viewer",
        )
        notice = Notice(request.request_id, approved)
        self._notices[request.task_id] = notice
        finished = anyio.Event()

        async def resolve() -> None:
            try:
                result = await self._kernel.resolve_approval(request.request_id, decision)
                notice.status = result.status
            except Exception as exc:
                # One line, as the command line would say it; the run's traceback is logged.
                notice.error = explain(exc)[0]
                log.warning("deciding request %s failed", request.request_id, exc_info=True)
            finally:
                notice.running = False
                finished.set()

        self._group.start_soon(resolve, name=f"resolve {request.request_id}")
        with anyio.move_on_after(RECORD_WAIT_S):
            while not finished.is_set():
                pending = await self._kernel.pending_approvals()
                if all(p.request_id != request.request_id for p in pending):
                    break  # recorded: the run goes on without this request waiting for it
                with anyio.move_on_after(_POLL_S):
                    await finished.wait()
        return notice
