"""Events the kernel publishes while a task runs, discriminated by ``kind``.

Every event carries the task it belongs to and ``seq``, its position in that task's live
stream (1, 2, 3, ...), so a consumer can order and de-duplicate what it receives. The
persisted log leaves out ephemeral events (text deltas), so its ``seq`` values rise with gaps.

A task's stream also carries the events of the nested agents it calls (their own tasks), in
the order they happen, each with its ``depth`` below the streamed task: order them by arrival,
and de-duplicate by ``task_id`` and ``seq``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.agent_protocol.approval import ApprovalDecision, ApprovalRequest
from shared.agent_protocol.messages import AssistantMessage, ToolCall, ToolResult
from shared.agent_protocol.risk import RiskLevel
from shared.agent_protocol.tasks import StrategyMode, TaskRequest, TokenUsage


class TaskEvent(BaseModel):
    """What every event has: identity, task, position in the task's stream, time, kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    event_id: str
    task_id: str
    seq: int = Field(ge=0)
    occurred_at: datetime
    depth: int = Field(
        default=0,
        ge=0,
        description="0 for the streamed task's own events; n for an event of a nested agent's "
        "task n agent calls below it, forwarded into its stream.",
    )


class TaskQueued(TaskEvent):
    """The task was accepted and persisted."""

    kind: Literal["task.queued"] = "task.queued"
    session_id: str
    trace_id: str
    request: TaskRequest


class TaskStarted(TaskEvent):
    """The task left the queue and runs."""

    kind: Literal["task.started"] = "task.started"


class StrategySelected(TaskEvent):
    """The router chose how to run the task, and why."""

    kind: Literal["task.strategy_selected"] = "task.strategy_selected"
    strategy: StrategyMode
    reason: str
    features: dict[str, Any] = Field(default_factory=dict)


class StrategyFallback(TaskEvent):
    """The chosen strategy gave up and the task continues with another, and why."""

    kind: Literal["task.strategy_fallback"] = "task.strategy_fallback"
    from_strategy: StrategyMode
    to_strategy: StrategyMode
    reason: str


class PlanCreated(TaskEvent):
    """The planner produced a valid plan (``revision`` 0, then 1, 2... after replanning)."""

    kind: Literal["plan.created"] = "plan.created"
    revision: int
    steps: list[dict[str, Any]]


class PlanStepStarted(TaskEvent):
    """A plan step began; steps whose dependencies are done run concurrently."""

    kind: Literal["plan.step_started"] = "plan.step_started"
    step_id: str
    goal: str


class PlanStepCompleted(TaskEvent):
    """A plan step ended with a result, or failed with an error."""

    kind: Literal["plan.step_completed"] = "plan.step_completed"
    step_id: str
    succeeded: bool
    output: str = ""
    error: str = ""


class WorkflowNodeStarted(TaskEvent):
    """A node of a workflow task is starting; the nodes of one layer run concurrently.

    Published before the node runs, when its layer begins: with more nodes in the layer than
    the workflow's ``max_concurrency``, a node may still wait for a free slot after it.
    """

    kind: Literal["workflow.node_started"] = "workflow.node_started"
    node: str
    layer: int = Field(ge=0, description="The layer's number in the run, from 0.")


class WorkflowNodeFinished(TaskEvent):
    """A workflow node ended: its state updates merged, or not (``error`` says why).

    Not succeeded: it failed, or its layer failed or was canceled. ``jump`` names the node
    it jumped to (a ``Next``, or an edge back: a loop; the first added, when its edges or
    route took it back to several), ``None`` when it did not jump.
    """

    kind: Literal["workflow.node_finished"] = "workflow.node_finished"
    node: str
    layer: int = Field(ge=0)
    succeeded: bool
    updated: list[str] = Field(default_factory=list, description="The state fields it wrote.")
    jump: str | None = None
    error: str = ""


class TaskWaitingApproval(TaskEvent):
    """The task is suspended until a human answers an approval request."""

    kind: Literal["task.waiting_approval"] = "task.waiting_approval"
    request_id: str


class TaskResumed(TaskEvent):
    """The task runs again: after waiting for approval, or taken over from a dead process."""

    kind: Literal["task.resumed"] = "task.resumed"
    reason: str = ""
    owner: str | None = None
    """The kernel that runs it from now on."""


class TaskSucceeded(TaskEvent):
    """The task finished with an answer."""

    kind: Literal["task.succeeded"] = "task.succeeded"
    output: str
    usage: TokenUsage


class TaskFailed(TaskEvent):
    """The task stopped on an error; ``error_type`` names the kernel error class."""

    kind: Literal["task.failed"] = "task.failed"
    error: str
    error_type: str
    usage: TokenUsage


class TaskCanceled(TaskEvent):
    """The task was canceled by its host."""

    kind: Literal["task.canceled"] = "task.canceled"
    reason: str = ""
    usage: TokenUsage


class LLMDelta(TaskEvent):
    """A piece of model text as it streams; not persisted, only published.

    ``attempt`` numbers the tries of one model call: a call that was tried again (after a cut
    stream, say) streams its text again from the start, so a host showing the text drops what
    it had from a lower attempt when a higher one begins.
    """

    kind: Literal["llm.delta"] = "llm.delta"
    text: str
    attempt: int = 1


class LLMCompleted(TaskEvent):
    """One model call finished."""

    kind: Literal["llm.completed"] = "llm.completed"
    model: str
    message: AssistantMessage
    usage: TokenUsage
    latency_ms: float
    finish_reason: str | None = None
    """Why the model stopped, as the provider said (``length``: its output token limit cut
    the answer off, and the kernel asks it to go on); ``None`` in events stored before it
    was recorded."""
    reasoning_opened_in_prompt: bool = False
    """The model closed a thinking block its chat template opened, so the cut text before
    this answer was thinking (see the kernel's ``inline_reasoning``); replays need it."""


class LLMFailed(TaskEvent):
    """One model call failed, after whatever retries and fallback models it was given.

    ``error_type`` names the kernel's error (``ModelRateLimitError``...), ``error`` is its
    message. What a run does next (a replan, a fallback, failing) follows as usual; a rerun
    plays the failure back at the same call.
    """

    kind: Literal["llm.failed"] = "llm.failed"
    model: str
    error_type: str
    error: str
    status_code: int | None = None
    latency_ms: float


class ToolStarted(TaskEvent):
    """A tool call is about to be judged and run.

    A call that needs a human is announced twice: before it is asked about (it may be
    denied and never run) and again when it starts after the answer (same ``tool_call.id``).
    """

    kind: Literal["tool.started"] = "tool.started"
    tool_call: ToolCall


class ToolCompleted(TaskEvent):
    """A tool call finished, successfully or with an error given back to the model.

    ``result`` holds what the tool returned, cut to the length the model is given. With
    ``untrusted``, the model got it as untrusted data: inside an ``<untrusted-data>`` block
    (with a warning when it looked like a prompt injection, see ``InjectionSuspected``), and
    the task is tainted from then on.
    """

    kind: Literal["tool.completed"] = "tool.completed"
    result: ToolResult
    latency_ms: float
    untrusted: bool = False


class PolicyDecided(TaskEvent):
    """The policy engine graded a tool call (every call is graded, before it runs)."""

    kind: Literal["policy.decided"] = "policy.decided"
    call_id: str
    tool: str
    risk: RiskLevel
    rule: str
    denied: bool
    approval_required: bool
    reason: str = ""
    tainted: bool = False


class ToolHookApplied(TaskEvent):
    """A host's tool hook blocked a call, rewrote its arguments, or failed.

    ``action``: ``blocked`` (the model is told ``reason``), ``rewrote`` (``arguments`` are the
    new ones, validated and then graded by the policy like any call), ``failed`` (the hook
    raised: before a call that blocks it, after one it is only recorded).
    """

    kind: Literal["tool.hook_applied"] = "tool.hook_applied"
    call_id: str
    tool: str
    hook: str
    action: Literal["blocked", "rewrote", "failed"]
    reason: str = ""
    arguments: dict[str, Any] | None = None


class TaskTainted(TaskEvent):
    """Content from outside the kernel's trust entered the task's context (once per task).

    From then on the task's writes, commands and network calls are graded one level higher;
    the mark is part of the task's state and survives suspension, restarts and resumes.
    """

    kind: Literal["task.tainted"] = "task.tainted"
    source: str
    """Where the content came from: a tool name, ``memory``..."""
    call_id: str | None = None
    reason: str = ""


class InjectionSuspected(TaskEvent):
    """A tool's output looks like a prompt injection (advisory: nothing is blocked by it)."""

    kind: Literal["safety.injection_suspected"] = "safety.injection_suspected"
    call_id: str
    tool: str
    signals: list[str]
    score: float


class ApprovalRequested(TaskEvent):
    """A tool call needs a human decision."""

    kind: Literal["approval.requested"] = "approval.requested"
    request: ApprovalRequest


class ApprovalResolved(TaskEvent):
    """A human decided on an approval request."""

    kind: Literal["approval.resolved"] = "approval.resolved"
    decision: ApprovalDecision


class AgentHandoff(TaskEvent):
    """The task handed a sub-task to an agent, which runs it as a child task.

    Published before the child's first event. ``agent`` is the name it was called by (a
    specialist, a team's member, an aggregator), ``child_task_id`` its task (``depth`` of the
    child below the top-level task is in its request's ``parent``).
    """

    kind: Literal["agent.handoff"] = "agent.handoff"
    agent: str
    child_task_id: str
    sub_task: str
    call_id: str | None = None


AgentEvent = Annotated[
    TaskQueued
    | TaskStarted
    | StrategySelected
    | StrategyFallback
    | PlanCreated
    | PlanStepStarted
    | PlanStepCompleted
    | WorkflowNodeStarted
    | WorkflowNodeFinished
    | TaskWaitingApproval
    | TaskResumed
    | TaskSucceeded
    | TaskFailed
    | TaskCanceled
    | LLMDelta
    | LLMCompleted
    | LLMFailed
    | ToolStarted
    | ToolCompleted
    | PolicyDecided
    | ToolHookApplied
    | TaskTainted
    | InjectionSuspected
    | ApprovalRequested
    | ApprovalResolved
    | AgentHandoff,
    Field(discriminator="kind"),
]

TERMINAL_EVENT_KINDS = frozenset({"task.succeeded", "task.failed", "task.canceled"})
"""Kinds after which a task's stream has no more events."""

EPHEMERAL_EVENT_KINDS = frozenset({"llm.delta"})
"""Kinds published to subscribers but not written to the task store."""
