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
    """Records approval requests durably and delivers each decision to its own request."""

    @abc.abstractmethod
    async def request(
        self, request: ApprovalRequest, timeout_s: float | None = None
    ) -> ApprovalDecision:
        """Persist ``request`` and wait for its decision.

        A timeout yields a denial. The request stays pending across a process restart until
        ``resolve`` is called.
        """

    @abc.abstractmethod
    async def resolve(self, decision: ApprovalDecision) -> None:
        """Answer a pending request.

        Raises:
            UsageError: No pending request has ``decision.request_id`` (unknown or already
                resolved).
        """

    @abc.abstractmethod
    async def pending(self) -> list[ApprovalRequest]:
        """Requests still waiting for a decision, oldest first."""
