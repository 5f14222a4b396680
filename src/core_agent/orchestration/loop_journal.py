"""What a reason-act loop writes down so that any process can carry it on.

A loop's conversation is kept as a message log beside a small typed checkpoint
(``LoopCheckpoint``), saved at each step boundary in one unit of work with the step's events
and spans:

* after the model answered: its message, and ``phase="tools"`` with the calls it asked for
  (when it gave its answer: ``phase="answered"`` with the answer);
* after the calls' results are in: the tool messages, and ``phase="model"``;
* when calls wait for a human: ``phase="tools"`` with the results already in and the
  requests.

A loop that resumes loads the checkpoint and the messages it covers, and carries on from the
phase it records: the calls of an interrupted turn go through the tool-call ledger
(``call_ledger``), so none that finished runs twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from core_agent.contracts.checkpoint_store import Checkpoint, ICheckpointStore
from core_agent.contracts.executor import RunStats
from core_agent.contracts.tool_call_ledger import IToolCallLedger
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ChatMessage,
    TokenUsage,
    ToolCall,
    ToolResult,
)


class LoopCheckpoint(Checkpoint):
    """Where a reason-act loop stands, besides its messages (see the module docstring).

    Version 2 changed what ``fingerprints`` means; a version 1 checkpoint still loads, as
    version 2 with no fingerprints (see ``_from_version_1``).
    """

    kind: Literal["react_loop"] = "react_loop"
    version: Literal[2] = 2
    phase: Literal["model", "tools", "answered"]
    run_id: str
    """Part of every tool call's idempotency key: a resumed run keeps it, a fresh run of the
    same task gets a new one."""
    message_count: int = Field(ge=0)
    turns: int = 0
    """Turns of this loop so far (the loop's own count, against its turn limit)."""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    task_turns: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    tainted: bool = False
    pending_calls: list[ToolCall] = Field(default_factory=list)
    finished: dict[int, ToolResult] = Field(default_factory=dict)
    """Calls of the pending turn (by position) whose results are in."""
    requests: list[ApprovalRequest] = Field(default_factory=list)
    """Approval requests the pending turn waits on."""
    fingerprints: dict[str, str] = Field(default_factory=dict)
    """Loop detection: the repeatable calls made since the last call that could have changed
    anything, by fingerprint, with the head of their result (see ``react_loop``). Version 1
    held every call made so far, writes and commands included."""
    error_streak: int = 0
    corrections_left: int = 1
    max_sent_turns: int | None = None
    """Set once the provider refused a prompt as too long: the most turns sent since, so a
    resumed loop does not send (and pay for) the refused length again."""
    observation_cap: int | None = None
    """Set once the provider refused a prompt of one turn as too long: the longest tool result
    sent since (see ``react_loop``), kept for the same reason."""
    cut_answer: str = ""
    """The text so far of an answer the model's output token limit cut off, which the
    model was asked to go on with (see ``react_loop``)."""
    cut_pending: str = ""
    """Cut text not yet known to be the answer's or the model's thinking (see
    ``react_loop``)."""
    continuations: int = 0
    """Times the model was asked to go on with ``cut_answer``."""
    output: str | None = None
    structured: dict[str, object] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """Read a version 1 checkpoint as version 2, forgetting its fingerprints.

        Version 1 remembered every call, with results that a later write or command may have
        made stale, and marked the calls of a pending turn as made before they ran: none of
        it can be told apart now, so all of it is dropped. The cost is at most one call run
        again, where keeping it could hand the model a stale result.
        """
        if isinstance(data, dict) and data.get("kind") == "react_loop" and data.get("version") == 1:
            return {**data, "version": 2, "fingerprints": {}}
        return data

    def restore_stats(self, stats: RunStats) -> None:
        """Put the run's counters back as they were when this was saved."""
        stats.usage = self.usage
        stats.turns = self.task_turns
        stats.llm_calls = self.llm_calls
        stats.tool_calls = self.tool_calls

    def decided_calls(
        self, decisions: Mapping[str, ApprovalDecision]
    ) -> dict[str, tuple[ApprovalRequest, ApprovalDecision]]:
        """The pending turn's requests a human decided: tool-call id -> request and decision.

        What a resumed loop's ``HumanChannel.resumed_approvals`` holds, so the gate applies
        the decision to the very call that was shown (``decisions`` maps request ids).
        """
        return {
            r.tool_call.id: (r, decisions[r.request_id])
            for r in self.requests
            if r.tool_call is not None and r.request_id in decisions
        }


@dataclass(slots=True)
class LoopJournal:
    """One loop's checkpoint key, and how much of its conversation is already stored."""

    checkpoints: ICheckpointStore
    task_id: str
    key: str
    ledger: IToolCallLedger | None = None
    stored_messages: int = 0
    restored: LoopCheckpoint | None = field(default=None)

    async def restore(self) -> tuple[LoopCheckpoint, list[ChatMessage]] | None:
        """The saved checkpoint and the messages it covers, or ``None`` if there is none.

        Raises:
            CorruptStateError: The checkpoint or its messages cannot be read.
        """
        checkpoint = await self.checkpoints.load(self.task_id, self.key, LoopCheckpoint)
        if checkpoint is None:
            return None
        messages = await self.checkpoints.load_messages(
            self.task_id, self.key, checkpoint.message_count
        )
        self.stored_messages = checkpoint.message_count
        self.restored = checkpoint
        return checkpoint, messages

    async def save(self, messages: list[ChatMessage], checkpoint: LoopCheckpoint) -> None:
        """Store the messages not stored yet, then the checkpoint that covers them.

        Call it inside the task store's unit of work, so both commit with the step.
        """
        if len(messages) < self.stored_messages:
            self.stored_messages = 0  # the conversation was rebuilt: store it whole again
        await self.checkpoints.append_messages(
            self.task_id, self.key, self.stored_messages, messages[self.stored_messages :]
        )
        self.stored_messages = len(messages)
        await self.checkpoints.save(self.task_id, self.key, checkpoint)
