"""Port for a strategy that runs a task to an answer (ReAct, plan-and-execute)."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from core_agent.contracts.tool_hook import ToolHook
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
    UsageLimits,
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
    last_input_tokens: int = 0
    """Prompt tokens of the latest model call: what the next call is predicted to need at
    least (a conversation's prompt grows, unless the window trims it), for the limits."""


async def _nothing_held() -> None:
    """Without a unit of work every write is already committed."""


def _nothing_handed_over() -> bool:
    """Without a unit of work there is nothing to hand over."""
    return False


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """What identifies the task a run belongs to, and the fixed terms it runs under."""

    task_id: str
    session_id: str
    trace_id: str
    request: TaskRequest
    max_turns: int
    output_type: type[BaseModel] | None = None
    """When set, the answer must validate against this model (see ``ExecutionOutcome``)."""
    sandbox: IToolSandbox | None = None
    """The task's own sandbox (its recorded workspace and limits); the executor's default
    when ``None``."""
    parent_span_id: str | None = None
    """The span the run's spans hang under (the task's root span)."""
    limits: UsageLimits = field(default_factory=UsageLimits)
    """The task's usage limits (its request's, completed with the kernel's defaults)."""
    session_limits: UsageLimits = field(default_factory=UsageLimits)
    """The limits of the session's tasks together (tokens and cost)."""
    session_usage: TokenUsage = field(default_factory=TokenUsage)
    """What the session's other tasks had used when this run started."""
    instructions: str = ""
    """What the host asked of the whole task besides its message: the request's
    ``system_prompt`` and the enabled capabilities' instructions (empty when neither). The
    run's system message holds them; an executor that writes system prompts of its own (the
    planner's, a plan step's) adds them (``prompts.task_instructions``)."""


@dataclass(slots=True)
class RunState:
    """What a run starts from and changes as it goes; the kernel reads it when the run ends."""

    messages: list[ChatMessage]
    """The conversation so far: system prompt and user task, in order. The executor appends."""
    stats: RunStats = field(default_factory=RunStats)
    tainted: bool = False
    """Set once untrusted content (files, command output, web content, tainted memories) has
    entered the conversation; part of the task's persisted state (see
    ``ExecutionContext.taint``)."""
    resuming: bool = False
    """The run carries on from the task's checkpoints (after a crash, or a human's decision)
    instead of starting over."""
    guidance: str | None = None
    """A human's guidance when the task resumes after waiting for one."""
    reserved_tool_calls: int = 0
    """Tool calls allowed to start (within ``limits.tool_calls``) not yet counted in
    ``stats.tool_calls``: concurrent calls and plan steps share one budget."""
    parent_run: ExecutionContext | None = None
    """The run of the task that started this one as a nested agent, while it waits for it in
    this process: its limits (and its own ancestors') bound this run too, shared with its
    other children (see ``child_runs``)."""
    child_runs: dict[str, RunState] = field(default_factory=dict)
    """The runs of the child tasks this run waits for, by task id, until their usage is added
    to ``stats``: what they spend counts against this run's limits as it is spent, so
    children running at once cannot each spend what only one of them may. (A child that
    does not run in this process stands here with the usage it has stored.)"""


@dataclass(slots=True)
class HumanChannel:
    """How the run asks humans about risky calls, and what they already decided."""

    request_approval: ApprovalRequester | None = None
    """Asks a connected human and waits; without it, risky calls suspend (``can_suspend``)
    or are refused."""
    can_suspend: bool = False
    """Whether the executor can stop at a risky call and resume later (``ApprovalPendingError``)
    when no approver is connected; otherwise such calls are refused."""
    resumed_approvals: dict[str, tuple[ApprovalRequest, ApprovalDecision]] = field(
        default_factory=dict
    )
    """On resume: tool-call id -> the request shown and the human's decision."""
    approval_decisions: dict[str, ApprovalDecision] = field(default_factory=dict)
    """On resume: every decision recorded for the task, by request id."""


@dataclass(slots=True)
class ExecutionContext:
    """Everything an executor gets from the kernel for one run of a task.

    ``task`` says what it runs, ``run`` is what it changes, ``humans`` how it asks for
    decisions; ``emit``, ``unit_of_work`` and ``flush`` are how it records what happens.
    Executors see nothing else of the task's lifecycle: the kernel moves the task between
    states from what ``IExecutor.run`` returns or raises.
    """

    task: TaskIdentity
    run: RunState
    emit: EventSink
    humans: HumanChannel = field(default_factory=HumanChannel)
    unit_of_work: Callable[[], AbstractAsyncContextManager[None]] = contextlib.nullcontext
    """Opens a unit of work in which the step's events, spans and checkpoint commit together
    (``ITaskStore.unit_of_work``); by default each write commits on its own."""
    flush: Callable[[], Awaitable[None]] = _nothing_held
    """Commits what the open unit of work holds so far, the unit staying open
    (``ITaskStore.flush``): called before the run waits on a tool or a human."""
    hand_over: Callable[[], bool] = _nothing_handed_over
    """Leaves what the open unit of work holds to the run's ending, to commit with it
    (``ITaskStore.hand_over``): called by the step that ends the run (its final answer).
    ``False`` when nothing could be handed over (the step then commits its own writes)."""
    tool_hooks: tuple[ToolHook, ...] = ()
    """The host's tool hooks, in order, run around every tool call (``contracts.tool_hook``)."""

    def under(self, span_id: str) -> ExecutionContext:
        """The same run, with the spans recorded through the result hung under ``span_id``."""
        return dataclasses.replace(
            self, task=dataclasses.replace(self.task, parent_span_id=span_id)
        )

    async def taint(self, source: str, *, call_id: str | None = None, reason: str = "") -> None:
        """Mark the task as holding untrusted content.

        The first mark is persisted as a ``task.tainted`` event (which also sets the stored
        task's flag).
        """
        if self.run.tainted:
            return
        self.run.tainted = True
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

    def check_resumable(self, request: TaskRequest) -> None:
        """Raise if this process cannot carry on a task of ``request`` (nothing by default).

        Called before a kernel takes over a task, so one it cannot run is left to another.

        Raises:
            DefinitionNotLoadedError: The task needs code this process has not loaded.
        """
        return

    @abc.abstractmethod
    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Run the task to an answer, or to a question for a human (``escalation``).

        Raises:
            ApprovalPendingError: Calls wait for a human (``humans.can_suspend``); the
                executor saved what it needs, and the kernel runs it again with
                ``run.resuming`` and the decisions (``humans.approval_decisions``).
            RunError: The task cannot finish (model error, turn limit...); the kernel records
                the task as failed with this error. Cancellation propagates unchanged.
        """
