"""ReAct as a strategy: the whole task in one reason-act loop.

When a risky call needs a human and no approver is connected, the run suspends: the
conversation, the finished calls of that turn and the pending requests are checkpointed, the
kernel records the task as ``waiting_approval``, and the run resumes from the checkpoint once
every request has a decision, after a restart too.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.errors import ApprovalPendingError
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.orchestration.react_loop import PendingTurn, ReActLoop, TurnSuspended
from core_agent.orchestration.structured_output import with_schema
from shared.agent_protocol import (
    ApprovalRequest,
    ChatMessage,
    StrategyMode,
    ToolCall,
    ToolResult,
    UserMessage,
)

CHECKPOINT_KEY = "react"
_MESSAGES: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])


class ReActExecutor(IExecutor):
    """Runs the task's conversation through a ``ReActLoop`` with the task's turn limit."""

    def __init__(self, loop: ReActLoop, checkpoints: ICheckpointStore | None = None) -> None:
        self._loop = loop
        self._checkpoints = checkpoints

    @property
    def strategy(self) -> StrategyMode:
        """Always ``react``."""
        return "react"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Loop until the model answers (with the typed answer when one is requested)."""
        request = context.request
        allowed = list(request.tools) if request.tools is not None else self._loop.tools.names()
        resume = await self._restore(context)
        if resume is None:
            if context.output_type is not None:
                with_schema(context.messages, context.output_type)
            if context.guidance:
                context.messages.append(UserMessage(content=context.guidance))
        context.can_suspend = self._checkpoints is not None
        try:
            result = await self._loop.run(
                context,
                context.messages,
                max_turns=context.max_turns,
                allowed=allowed,
                parent_span_id=context.parent_span_id,
                output_type=context.output_type,
                resume=resume,
            )
        except TurnSuspended as suspended:
            await self._save(context, suspended)
            raise ApprovalPendingError(suspended.requests) from None
        if resume is not None and self._checkpoints is not None:
            await self._checkpoints.save(context.task_id, CHECKPOINT_KEY, {"suspended": False})
        return ExecutionOutcome(output=result.output, structured=result.structured)

    async def _save(self, context: ExecutionContext, suspended: TurnSuspended) -> None:
        assert self._checkpoints is not None
        state: dict[str, Any] = {
            "suspended": True,
            "messages": _MESSAGES.dump_python(context.messages, mode="json"),
            "calls": [call.model_dump(mode="json") for call in suspended.turn.calls],
            "results": {
                str(index): result.model_dump(mode="json")
                for index, result in suspended.turn.results.items()
            },
            "requests": [r.model_dump(mode="json") for r in suspended.requests],
            "tainted": context.tainted,
            "turns": context.stats.turns,
        }
        await self._checkpoints.save(context.task_id, CHECKPOINT_KEY, state)

    async def _restore(self, context: ExecutionContext) -> PendingTurn | None:
        if self._checkpoints is None or not context.approval_decisions:
            return None
        state = await self._checkpoints.load(context.task_id, CHECKPOINT_KEY)
        if not state or not state.get("suspended"):
            return None
        requests = [ApprovalRequest.model_validate(r) for r in state["requests"]]
        context.resumed_approvals = {
            request.tool_call.id: (request, context.approval_decisions[request.request_id])
            for request in requests
            if request.tool_call is not None and request.request_id in context.approval_decisions
        }
        context.messages[:] = _MESSAGES.validate_python(state["messages"])
        context.tainted = context.tainted or bool(state.get("tainted"))
        context.stats.turns = int(state.get("turns", 0))
        return PendingTurn(
            calls=tuple(ToolCall.model_validate(c) for c in state["calls"]),
            results={int(i): ToolResult.model_validate(r) for i, r in state["results"].items()},
        )
