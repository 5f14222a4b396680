"""ReAct as a strategy: the whole task in one reason-act loop."""

from __future__ import annotations

from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.orchestration.react_loop import ReActLoop
from core_agent.orchestration.structured_output import with_schema
from shared.agent_protocol import StrategyMode, UserMessage


class ReActExecutor(IExecutor):
    """Runs the task's conversation through a ``ReActLoop`` with the task's turn limit."""

    def __init__(self, loop: ReActLoop) -> None:
        self._loop = loop

    @property
    def strategy(self) -> StrategyMode:
        """Always ``react``."""
        return "react"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Loop until the model answers (with the typed answer when one is requested)."""
        request = context.request
        allowed = list(request.tools) if request.tools is not None else self._loop.tools.names()
        if context.output_type is not None:
            with_schema(context.messages, context.output_type)
        if context.guidance:
            context.messages.append(UserMessage(content=context.guidance))
        result = await self._loop.run(
            context,
            context.messages,
            max_turns=context.max_turns,
            allowed=allowed,
            parent_span_id=context.parent_span_id,
            output_type=context.output_type,
        )
        return ExecutionOutcome(output=result.output, structured=result.structured)
