"""Port for a strategy that runs a task to an answer (ReAct, plan-and-execute)."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from core_agent.contracts.tool_sandbox import IToolSandbox
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ChatMessage,
    StrategyMode,
    TaskEvent,
    TaskRequest,
    TaskTainted,
    TokenUsage,
)


class ApprovalRequester(Protocol):
    """Asks a human about one request and returns the decision (the kernel provides it).

    While it waits, the task is ``waiting_approval``; a timeout is a denial.
    """

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Wait for the decision on ``request``."""


class EventSink(Protocol):
    """Publishes an event of ``event_type`` for the running task.

    The kernel fills in ``event_id``, ``task_id``, ``seq`` and ``occurred_at``; the caller gives
    the event's own fields. Awaiting it persists the event (unless it is ephemeral) before
    subscribers see it.
    """

    async def __call__(self, event_type: type[TaskEvent], /, **fields: Any) -> None:
        """Publish one event."""


@dataclass(slots=True)
class RunStats:
    """What a run has consumed so far; kept up to date even when the run fails."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    turns: int = 0
    llm_calls: int = 0
    tool_calls: int = 0


@dataclass(slots=True)
class ExecutionContext:
    """Everything an executor needs to know about the task it runs."""

    task_id: str
    session_id: str
    trace_id: str
    request: TaskRequest
    messages: list[ChatMessage]
    """The conversation so far: system prompt and user task, in order. The executor appends."""
    max_turns: int
    emit: EventSink
    parent_span_id: str | None = None
    stats: RunStats = field(default_factory=RunStats)
    output_type: type[BaseModel] | None = None
    """When set, the answer must validate against this model (see ``ExecutionOutcome``)."""
    guidance: str | None = None
    """A human's guidance when the task resumes after waiting for one."""
    request_approval: ApprovalRequester | None = None
    """How risky calls reach a human; without it they are refused."""
    tainted: bool = False
    """Set once untrusted content (files, command output, web content, tainted memories) has
    entered the conversation; part of the task's persisted state (see ``taint``)."""
    sandbox: IToolSandbox | None = None
    """The task's own sandbox (its recorded workspace and limits); the executor's default
    when ``None``."""
    can_suspend: bool = False
    """Whether the executor can stop at a risky call and resume later (``ApprovalPendingError``)
    when no approver is connected; otherwise such calls are refused."""
    resumed_approvals: dict[str, tuple[ApprovalRequest, ApprovalDecision]] = field(
        default_factory=dict
    )
    """On resume: tool-call id -> the request shown and the human's decision."""
    approval_decisions: dict[str, ApprovalDecision] = field(default_factory=dict)
    """On resume: every decision recorded for the task, by request id."""
    resuming: bool = False
    """The run carries on from the task's checkpoints (after a crash, or a human's decision)
    instead of starting over."""
    unit_of_work: Callable[[], AbstractAsyncContextManager[None]] = contextlib.nullcontext
    """Opens a unit of work in which the step's events, spans and checkpoint commit together
    (``ITaskStore.unit_of_work``); by default each write commits on its own."""

    async def taint(self, source: str, *, call_id: str | None = None, reason: str = "") -> None:
        """Mark the task as holding untrusted content.

        The first mark is persisted as a ``task.tainted`` event (which also sets the stored
        task's flag).
        """
        if self.tainted:
            return
        self.tainted = True
        await self.emit(TaskTainted, source=source, call_id=call_id, reason=reason)


@dataclass(frozen=True, slots=True)
class Escalation:
    """A question for a human: the run cannot go on without one."""

    question: str
    reason: str


@dataclass(frozen=True, slots=True)
class ExecutionOutcome:
    """How a run ended without error: an answer, or a question for a human.

    ``structured`` holds the validated answer (as JSON data) when ``output_type`` was set.
    """

    output: str = ""
    structured: dict[str, Any] | None = None
    escalation: Escalation | None = None


class IExecutor(abc.ABC):
    """Runs one task with one strategy until it has an answer.

    An executor records a span for every model and tool call and publishes the matching
    events through ``context.emit``. It keeps ``context.stats`` current as it goes, so usage
    is known even when it fails.
    """

    @property
    @abc.abstractmethod
    def strategy(self) -> StrategyMode:
        """The strategy this executor implements."""

    @abc.abstractmethod
    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Run the task to an answer, or to a question for a human (``escalation``).

        Raises:
            RunError: The task cannot finish (model error, turn limit...); the kernel records
                the task as failed with this error. Cancellation propagates unchanged.
        """
