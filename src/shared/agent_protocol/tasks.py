"""Task requests, task status and task results."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class TaskStatus(StrEnum):
    """Lifecycle of a task.

    ``queued -> running -> (waiting_approval <-> running) -> succeeded | failed | canceled``.
    """

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """Whether no transition leaves this status."""
        return self in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED)


StrategyMode = Literal["react", "plan_execute", "workflow", "team"]
"""How a task runs: a model's reason-act loop, a plan, a workflow (started by
``core_agent.workflows.run_workflow``), or a team of agents (``team``: the members of a team
the kernel knows by name run as child tasks, see ``AgentKernel.run_team``)."""


class UsageLimits(BaseModel):
    """Bounds on what a task (or the tasks of a session) may use; ``None`` is no bound.

    A run stops ``failed`` with ``UsageLimitExceededError`` before a model call that would
    pass a token or cost limit, before a turn's tool calls that would pass ``tool_calls``,
    and when ``wall_time_s`` runs out (see the README, "Usage limits", for what is counted).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int | None = Field(default=None, ge=1, description="Prompt tokens, all calls.")
    output_tokens: int | None = Field(
        default=None, ge=1, description="Completion tokens, all calls."
    )
    total_tokens: int | None = Field(default=None, ge=1, description="Input plus output tokens.")
    cost_usd: float | None = Field(
        default=None, gt=0, description="Cost of the model calls (calls of unknown price: 0)."
    )
    tool_calls: int | None = Field(default=None, ge=0, description="Tool calls run (per task).")
    wall_time_s: float | None = Field(
        default=None, gt=0, description="Running time of each run of the task (not waits)."
    )

    def with_defaults(self, defaults: UsageLimits | None) -> UsageLimits:
        """These limits, with each one left unset here taken from ``defaults``."""
        if defaults is None:
            return self
        own = self.model_dump(exclude_none=True)
        return defaults.model_copy(update=own)

    @property
    def bounded(self) -> bool:
        """Whether any limit is set."""
        return any(value is not None for value in self.model_dump().values())


class ParentTask(BaseModel):
    """The task a nested agent's task was started by, and where (``TaskRequest.parent``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(description="The parent task.")
    depth: int = Field(ge=1, description="How many agent calls below a top-level task: 1, 2...")
    agent: str = Field(description="The name the parent called the agent by.")
    span_id: str | None = Field(
        default=None, description="The parent's span the child ran under (its tool call)."
    )
    call_id: str | None = Field(default=None, description="The parent's tool call, if any.")
    tainted: bool = Field(
        default=False,
        description="The parent held untrusted content when it wrote the sub-task: the child "
        "starts tainted too, so its calls are graded as the parent's would be.",
    )


class TaskRequest(BaseModel):
    """What a host asks the kernel to do."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["task_request"] = "task_request"
    task: str = Field(min_length=1, description="The instruction, in natural language.")
    session_id: str | None = Field(
        default=None, description="Session to attach the task to; a new one when absent."
    )
    system_prompt: str | None = Field(default=None, description="Overrides the default prompt.")
    force_mode: StrategyMode | None = Field(
        default=None, description="Skip routing and run this strategy."
    )
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    tools: tuple[str, ...] | None = Field(
        default=None, description="Names of the tools this task may use; all when absent."
    )
    workspace_roots: tuple[str, ...] | None = Field(
        default=None,
        description="Directories this task's tools may work in; the configured roots when "
        "absent. Recorded with the task, so a resumed task keeps them.",
    )
    limits: UsageLimits | None = Field(
        default=None,
        description="This task's usage limits; each one left unset is the kernel's default "
        "(AGENT_LIMIT_*).",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    parent: ParentTask | None = Field(
        default=None,
        description="Set by the kernel on the task of a nested agent (an agent called as a "
        "tool, a team's member): the task that started it, at what depth.",
    )


_N = TypeVar("_N", int, float)


class TokenUsage(BaseModel):
    """Tokens and cost of one or more model calls.

    ``cost_usd`` is ``None`` when the price of the model is unknown (a local server, say);
    ``cache_read_tokens`` and ``reasoning_tokens`` are ``None`` when the provider did not
    report them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    cache_read_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Input tokens read from the provider's prompt cache (part of input_tokens).",
    )
    reasoning_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Output tokens the model spent reasoning (part of output_tokens).",
    )

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=_sum(self.cost_usd, other.cost_usd),
            cache_read_tokens=_sum(self.cache_read_tokens, other.cache_read_tokens),
            reasoning_tokens=_sum(self.reasoning_tokens, other.reasoning_tokens),
        )


def _sum(first: _N | None, second: _N | None) -> _N | None:
    """The sum of two counts of which either may be unknown; unknown only when both are."""
    if first is None:
        return second
    if second is None:
        return first
    return first + second


class TaskState(BaseModel):
    """A task as stored: its status and what it has produced so far."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["task_state"] = "task_state"
    task_id: str
    session_id: str
    trace_id: str
    status: TaskStatus
    request: TaskRequest
    strategy: StrategyMode | None = None
    output: str | None = None
    error: str | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    created_at: datetime
    updated_at: datetime
    tainted: bool = Field(
        default=False, description="Untrusted content entered the task's context."
    )
    sandbox: dict[str, Any] | None = Field(
        default=None,
        description="The sandbox settings the task runs under (workspace roots, limits...), "
        "recorded when it starts; a resumed task uses them, whoever resumes it.",
    )
    owner: str | None = Field(
        default=None, description="The kernel running the task (while it holds the lease)."
    )
    lease_expires_at: datetime | None = Field(
        default=None,
        description="Until when the owner's lease holds; after it, another kernel may resume "
        "the task.",
    )
    cancel_requested: str | None = Field(
        default=None, description="Why cancellation was requested, while the owner carries it out."
    )
    response_schema: dict[str, Any] | None = Field(
        default=None,
        description="The JSON Schema the answer must validate against, when the task was "
        "started with a response model; a kernel resuming the task checks the model it uses "
        "against it.",
    )
    response_model: str | None = Field(
        default=None,
        description="That response model's name (module:qualname). A resuming kernel may find "
        "the class by it among modules already imported; it never imports one.",
    )


class TaskResult(BaseModel):
    """The outcome of a task that has finished or stopped to wait for a human."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["task_result"] = "task_result"
    task_id: str
    session_id: str
    trace_id: str
    status: TaskStatus
    output: str | None = None
    error: str | None = None
    error_type: str | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    turns: int = 0
    structured_output: dict[str, Any] | None = Field(
        default=None, description="The validated answer when a response model was requested."
    )
    pending_approval: str | None = Field(
        default=None, description="With status waiting_approval: the request to resolve."
    )
