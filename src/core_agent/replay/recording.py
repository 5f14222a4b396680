"""What a task's events recorded of the outside world: model answers, tool results, decisions.

A rerun plays these back in place of the model, the tools (with recorded tools) and the
humans, so the current kernel's own part (prompts, routing, policy, tool validation) runs
for real while nothing outside is asked again.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from core_agent.orchestration.react_loop import KERNEL_REFUSALS
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    AssistantMessage,
    LLMCompleted,
    LLMFailed,
    TaskEvent,
    TokenUsage,
    ToolCompleted,
    ToolResult,
)


@dataclass(frozen=True, slots=True)
class RecordedModelTurn:
    """One model answer, as the model gave it."""

    model: str
    message: AssistantMessage
    usage: TokenUsage
    finish_reason: str | None = None
    """As recorded; ``None`` for answers recorded before it was."""
    reasoning_opened_in_prompt: bool = False


@dataclass(frozen=True, slots=True)
class RecordedModelFailure:
    """A model call that failed (``llm.failed``): its error's name, message and status."""

    model: str
    error_type: str
    error: str
    status_code: int | None = None


@dataclass(frozen=True, slots=True)
class RecordedApproval:
    """A request a human was asked, and their decision (``None``: never decided)."""

    request: ApprovalRequest
    decision: ApprovalDecision | None


@dataclass(slots=True)
class Recording:
    """The recorded answers of one task, each handed out once, in order.

    ``model_turns`` in the order the model gave them, a call that failed in its place. Tool
    results by call (id and tool name): only results a tool produced, not refusals the kernel
    made before a tool ran (those the current kernel makes again, or not). Decisions by
    call, and questions (no call) in order.
    """

    model_turns: list[RecordedModelTurn | RecordedModelFailure]
    tool_results: dict[tuple[str, str], deque[ToolResult]] = field(default_factory=dict)
    approvals: dict[tuple[str, str], deque[RecordedApproval]] = field(default_factory=dict)
    questions: deque[RecordedApproval] = field(default_factory=deque)
    tool_calls_used: int = 0

    @classmethod
    def from_events(cls, events: Sequence[TaskEvent]) -> Recording:
        """Read a task's recording from its stored events."""
        turns: list[RecordedModelTurn | RecordedModelFailure] = []
        results: dict[tuple[str, str], deque[ToolResult]] = defaultdict(deque)
        requests: dict[str, ApprovalRequest] = {}
        decisions: dict[str, ApprovalDecision] = {}
        for event in events:
            if isinstance(event, LLMCompleted):
                turns.append(
                    RecordedModelTurn(
                        event.model,
                        event.message,
                        event.usage,
                        event.finish_reason,
                        event.reasoning_opened_in_prompt,
                    )
                )
            elif isinstance(event, LLMFailed):
                turns.append(
                    RecordedModelFailure(
                        event.model, event.error_type, event.error, event.status_code
                    )
                )
            elif isinstance(event, ToolCompleted):
                result = event.result
                if not (result.is_error and result.error_type in KERNEL_REFUSALS):
                    results[(result.call_id, result.name)].append(result)
            elif isinstance(event, ApprovalRequested):
                requests[event.request.request_id] = event.request
            elif isinstance(event, ApprovalResolved):
                decisions[event.decision.request_id] = event.decision
        approvals: dict[tuple[str, str], deque[RecordedApproval]] = defaultdict(deque)
        questions: deque[RecordedApproval] = deque()
        for request_id, request in requests.items():
            recorded = RecordedApproval(request, decisions.get(request_id))
            call = request.tool_call
            if call is None:
                questions.append(recorded)
            else:
                approvals[(call.id, call.name)].append(recorded)
        return cls(turns, dict(results), dict(approvals), questions)

    def take_tool_result(self, call_id: str, name: str) -> ToolResult | None:
        """The recorded result of this call, once; ``None`` if the recording has none."""
        queue = self.tool_results.get((call_id, name))
        if not queue:
            return None
        self.tool_calls_used += 1
        return queue.popleft()

    def take_approval(self, request: ApprovalRequest) -> RecordedApproval | None:
        """The recorded request matching ``request`` (same call, or the next question)."""
        call = request.tool_call
        if call is None:
            return self.questions.popleft() if self.questions else None
        queue = self.approvals.get((call.id, call.name))
        return queue.popleft() if queue else None
