"""Port through which a human approves or denies risky tool calls."""

from __future__ import annotations

import abc
from collections.abc import Awaitable
from typing import Protocol

from shared.agent_protocol import ApprovalDecision, ApprovalRequest


class ApprovalCallback(Protocol):
    """A host's way to ask its user: sync or async, returns the decision."""

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision | Awaitable[ApprovalDecision]:
        """Show ``request`` to a human and return their decision."""


class IApprovalGateway(abc.ABC):
    """Reaches a human for decisions on approval requests.

    The kernel records every request durably before asking and every decision after, so a
    gateway only carries the question and the answer. Requests it cannot answer stay pending
    until the host calls ``AgentKernel.resolve_approval``, in this process or after a restart.
    """

    @abc.abstractmethod
    async def ask(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """Show ``request`` to a human and wait for the decision.

        Returns:
            The decision (its ``request_id`` must be ``request.request_id``); a denial when
            the wait times out or the channel fails; ``None`` when no human can be reached
            now, which leaves the request pending. Never raises for a channel failure.
        """
