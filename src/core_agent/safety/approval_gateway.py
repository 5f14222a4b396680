"""``IApprovalGateway`` over a host callback (a terminal prompt, a GUI dialog, a web hook)."""

from __future__ import annotations

import inspect
import logging

import anyio
import anyio.to_thread

from core_agent.contracts.approval_gateway import ApprovalCallback, IApprovalGateway
from core_agent.contracts.metrics import KERNEL_DECIDER
from shared.agent_protocol import ApprovalDecision, ApprovalRequest

log = logging.getLogger(__name__)


def denial(request: ApprovalRequest, reason: str) -> ApprovalDecision:
    """A denial of ``request`` made by the kernel itself."""
    return ApprovalDecision(
        request_id=request.request_id, approved=False, reason=reason, decided_by=KERNEL_DECIDER
    )


class CallbackApprovalGateway(IApprovalGateway):
    """Calls a sync or async callback with a time limit; a timeout or a failure denies.

    Sync callbacks run in a worker thread (they may block on a terminal prompt).
    """

    def __init__(self, callback: ApprovalCallback, *, timeout_s: float = 600.0) -> None:
        self._callback = callback
        self._timeout_s = timeout_s

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The callback's decision, checked to answer this request."""
        callback = self._callback
        try:
            with anyio.move_on_after(self._timeout_s) as scope:
                if inspect.iscoroutinefunction(callback):
                    answer = await callback(request)
                else:
                    answer = await anyio.to_thread.run_sync(
                        callback, request, abandon_on_cancel=True
                    )
                    if inspect.isawaitable(answer):
                        answer = await answer
        except Exception as exc:
            log.warning("approval callback failed", exc_info=True)
            return denial(request, f"the approval callback failed: {type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            return denial(request, f"no decision within {self._timeout_s:g} s")
        if not isinstance(answer, ApprovalDecision):
            return denial(request, f"the approval callback returned {type(answer).__name__}")
        if answer.request_id != request.request_id:
            return denial(request, "the decision names another request")
        return answer
