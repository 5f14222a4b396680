"""ReAct as a strategy: the whole task in one reason-act loop.

With a checkpoint store the loop keeps a journal (``loop_journal``): each step is saved, so a
run carries on from its last step in any process, after a crash or a restart. When a risky
call needs a human and no approver is connected, the run suspends: the journal holds the
conversation, the calls of that turn that finished and the pending requests; the kernel
records the task as ``waiting_approval``, and the run resumes from there once every request
has a decision.
"""

from __future__ import annotations

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.errors import ApprovalPendingError
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.contracts.tool_call_ledger import IToolCallLedger
from core_agent.orchestration.loop_journal import LoopJournal
from core_agent.orchestration.react_loop import ReActLoop, TurnSuspended
from core_agent.orchestration.structured_output import with_schema
from shared.agent_protocol import StrategyMode, UserMessage

CHECKPOINT_KEY = "react"


class ReActExecutor(IExecutor):
    """Runs the task's conversation through a ``ReActLoop`` with the task's turn limit."""

    def __init__(
        self,
        loop: ReActLoop,
        checkpoints: ICheckpointStore | None = None,
        ledger: IToolCallLedger | None = None,
    ) -> None:
        self._loop = loop
        self._checkpoints = checkpoints
        self._ledger = ledger

    @property
    def strategy(self) -> StrategyMode:
        """Always ``react``."""
        return "react"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Loop until the model answers (with the typed answer when one is requested).

        Raises:
            CorruptStateError: A resumed run's checkpoint cannot be read.
        """
        request = context.task.request
        allowed = list(request.tools) if request.tools is not None else self._loop.tools.names()
        journal = None
        if self._checkpoints is not None:
            journal = LoopJournal(
                self._checkpoints, context.task.task_id, CHECKPOINT_KEY, ledger=self._ledger
            )
        restored = await journal.restore() if journal is not None and context.run.resuming else None
        if restored is not None:
            checkpoint, messages = restored
            context.run.messages[:] = messages
            checkpoint.restore_stats(context.run.stats)
            context.run.tainted = context.run.tainted or checkpoint.tainted
            context.humans.resumed_approvals = checkpoint.decided_calls(
                context.humans.approval_decisions
            )
        else:
            if context.task.output_type is not None:
                with_schema(context.run.messages, context.task.output_type)
            if context.run.guidance:
                context.run.messages.append(UserMessage(content=context.run.guidance))
        context.humans.can_suspend = self._checkpoints is not None
        try:
            result = await self._loop.run(
                context,
                context.run.messages,
                max_turns=context.task.max_turns,
                allowed=allowed,
                parent_span_id=context.task.parent_span_id,
                output_type=context.task.output_type,
                journal=journal,
                ends_run=True,
            )
        except TurnSuspended as suspended:
            raise ApprovalPendingError(suspended.requests) from None
        return ExecutionOutcome(output=result.output, structured=result.structured)
