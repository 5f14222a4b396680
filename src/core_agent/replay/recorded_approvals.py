"""Humans' decisions played back from a recording, for a rerun whose tools do not act.

A request the current kernel makes about the same call (same call id and tool) as a recorded
one gets the recorded decision, with its scope. A request the recording never made, or made
but nobody decided, is denied: the rerun has parted from the recording there, and no human
is asked on the recording's behalf.

A rerun whose tools act for real (``live``) does not use this: a human's yes to a call then
is not a yes to running it again now.
"""

from __future__ import annotations

from core_agent.contracts.approval_gateway import IApprovalGateway
from core_agent.replay.recording import Recording
from core_agent.safety.approval_gateway import denial
from shared.agent_protocol import ApprovalDecision, ApprovalRequest


class RecordedApprovalGateway(IApprovalGateway):
    """Answers each request with the recorded decision on the same call."""

    def __init__(self, recording: Recording) -> None:
        self._recording = recording

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The recorded decision on the same call; a denial when the recording has none."""
        recorded = self._recording.take_approval(request)
        if recorded is None:
            return denial(request, "replay: the recording has no such request")
        if recorded.decision is None:
            return denial(request, "replay: nobody decided this request in the recording")
        return recorded.decision.model_copy(
            update={
                "request_id": request.request_id,
                "decided_by": f"replay of {recorded.decision.decided_by or 'a human'}",
            }
        )
