"""What the stores count for ``core-agent stats``: the tasks asked about, and the answers.

``ITaskStore.task_metrics`` and ``ITraceStore.span_metrics`` answer for one ``MetricsScope``
(every task, the tasks created since a moment, the tasks of a session); ``AgentMetrics`` is
both answers together, as ``AgentKernel.metrics`` returns them and ``core-agent stats --json``
prints them (``model_dump(mode="json")``).

Percentiles are nearest-rank: the p-th percentile of n values is the ⌈p·n/100⌉-th smallest,
so it is always a value that was measured (of 4 values, p50 is the 2nd and p95 the 4th).
Latencies are in milliseconds. A percentile of no values is ``None``, and so is a rate
whose denominator is 0.
"""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, computed_field, field_validator

from shared.agent_protocol import TaskStatus

REFUSED_ERROR_TYPES = frozenset(
    {
        "ToolNotFoundError",
        "ToolArgumentsError",
        "PolicyDeniedError",
        "ApprovalDeniedError",
        "ApprovalPendingError",
        "ToolHookBlockedError",
        "LoopDetected",
        "StructuredOutputError",
        "RedactedArgumentsError",
    }
)
"""Error types of tool results the kernel wrote itself, before the tool ran (an unknown tool,
bad arguments, a policy or human refusal, a blocking hook, a repeated call, a stored call
whose arguments were redacted). A tool span with
one of these in its ``error_type`` attribute counts as *refused*, not as the tool failing."""

KERNEL_DECIDER = "core-agent"
"""The ``decided_by`` of the approval decisions the kernel makes itself: denials when the
approver did not answer in time, failed, or could not be asked (counted as *expired*)."""


class MetricsScope(BaseModel):
    """The tasks counted: created at or after ``since``, of ``session_id``; all when unset.

    Spans and approval requests are counted with their task: a span of a task created
    before ``since`` is left out even when it ended after.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    since: AwareDatetime | None = None
    session_id: str | None = None


class LatencyPercentiles(BaseModel):
    """How many durations were measured, and their median and 95th percentile.

    The percentiles are rounded to the microsecond (what the stores' clocks resolve).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(default=0, ge=0)
    p50_ms: float | None = None
    p95_ms: float | None = None

    @field_validator("p50_ms", "p95_ms")
    @classmethod
    def _to_the_microsecond(cls, value: float | None) -> float | None:
        return None if value is None else round(value, 3)


class KindLatency(BaseModel):
    """The durations of the spans of one kind (``llm``, ``tool``, ``approval``, ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    latency: LatencyPercentiles


class ModelMetrics(BaseModel):
    """The model calls (``llm`` spans) answered by one model.

    A call that fell back to another model counts for the model that answered
    (its ``fallback_model``). ``cost_usd`` is ``None`` when no call had a known price.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    calls: int = Field(ge=0)
    errors: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = None
    latency: LatencyPercentiles = LatencyPercentiles()


class ToolMetrics(BaseModel):
    """The calls of one tool (``tool`` spans; a call suspended for a human counts once).

    ``latency`` is the calls' spans' (a refused call's is short: it never ran). ``refused``
    calls never ran (see ``REFUSED_ERROR_TYPES``); ``errors`` ran and failed
    (the tool raised, timed out, was stopped by the sandbox). ``success_rate`` is the share
    of the calls that ran which succeeded.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    calls: int = Field(ge=0)
    errors: int = Field(default=0, ge=0)
    refused: int = Field(default=0, ge=0)
    latency: LatencyPercentiles = LatencyPercentiles()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def success_rate(self) -> float | None:
        """``(calls - refused - errors) / (calls - refused)``; ``None`` if none ran."""
        ran = self.calls - self.refused
        return (ran - self.errors) / ran if ran else None


class TokenTotals(BaseModel):
    """Tokens and cost of every model call of the tasks (see ``ITraceStore.span_metrics``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: int = Field(default=0, ge=0)
    output: int = Field(default=0, ge=0)
    cost_usd: float | None = None


class TaskCounts(BaseModel):
    """The tasks by status (every status present, 0 when none is in it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    by_status: dict[TaskStatus, int] = Field(default_factory=lambda: dict.fromkeys(TaskStatus, 0))
    unknown_status: dict[str, int] = Field(default_factory=dict)
    """Tasks stored with a status this build does not know (a newer core-agent's, or a damaged
    row), by that status: not in ``by_status`` nor ``total``, as task listings leave them out."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        """All the tasks counted (those of ``unknown_status`` are not)."""
        return sum(self.by_status.values())


class ApprovalMetrics(BaseModel):
    """What became of the approval requests of the tasks, and how long humans took.

    Every request ends up in one of: ``approved`` and ``denied`` (a person decided),
    ``expired`` (no person did: the kernel denied it because the approver did not answer
    in time, failed or could not be asked, or its task ended while it waited), ``pending``
    (its task still waits). ``wait`` runs from the request to its decision, for every
    decided request (the kernel's denials included).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    requested: int = Field(default=0, ge=0)
    approved: int = Field(default=0, ge=0)
    denied: int = Field(default=0, ge=0)
    expired: int = Field(default=0, ge=0)
    pending: int = Field(default=0, ge=0)
    wait: LatencyPercentiles = LatencyPercentiles()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def approved_rate(self) -> float | None:
        """``approved / requested``."""
        return self.approved / self.requested if self.requested else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def denied_rate(self) -> float | None:
        """``denied / requested``."""
        return self.denied / self.requested if self.requested else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def expired_rate(self) -> float | None:
        """``expired / requested``."""
        return self.expired / self.requested if self.requested else None


class TaskMetrics(BaseModel):
    """The task store's answer: tasks by status and their approval requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: TaskCounts = TaskCounts()
    approvals: ApprovalMetrics = ApprovalMetrics()


class SpanMetrics(BaseModel):
    """The trace store's answer: tokens and cost, latencies, models and tools.

    ``latency_by_kind`` is sorted by kind, ``models`` and ``tools`` by calls (most first),
    then name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: TokenTotals = TokenTotals()
    latency_by_kind: list[KindLatency] = Field(default_factory=list)
    models: list[ModelMetrics] = Field(default_factory=list)
    tools: list[ToolMetrics] = Field(default_factory=list)


class AgentMetrics(BaseModel):
    """Everything ``core-agent stats`` reports, for one scope.

    As JSON (``model_dump(mode="json")``), the shape ``core-agent stats --json`` prints::

        {"scope": {"since": ISO time | null, "session_id": str | null},
         "tasks": {"by_status": {"queued": n, ..., "canceled": n},
                   "unknown_status": {str: n, ...}, "total": n},
         "tokens": {"input": n, "output": n, "cost_usd": x | null},
         "latency_by_kind": [{"kind": str,
                              "latency": {"count": n, "p50_ms": x, "p95_ms": x}}, ...],
         "models": [{"model": str, "calls": n, "errors": n, "input_tokens": n,
                     "output_tokens": n, "cost_usd": x | null,
                     "latency": {"count": n, "p50_ms": x, "p95_ms": x}}, ...],
         "tools": [{"tool": str, "calls": n, "errors": n, "refused": n,
                    "latency": {"count": n, "p50_ms": x, "p95_ms": x},
                    "success_rate": x | null}, ...],
         "approvals": {"requested": n, "approved": n, "denied": n, "expired": n,
                       "pending": n, "wait": {"count": n, "p50_ms": x, "p95_ms": x},
                       "approved_rate": x | null, "denied_rate": x | null,
                       "expired_rate": x | null}}
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: MetricsScope = MetricsScope()
    tasks: TaskCounts = TaskCounts()
    tokens: TokenTotals = TokenTotals()
    latency_by_kind: list[KindLatency] = Field(default_factory=list)
    models: list[ModelMetrics] = Field(default_factory=list)
    tools: list[ToolMetrics] = Field(default_factory=list)
    approvals: ApprovalMetrics = ApprovalMetrics()

    @classmethod
    def combine(cls, scope: MetricsScope, tasks: TaskMetrics, spans: SpanMetrics) -> AgentMetrics:
        """The two stores' answers for ``scope`` as one report."""
        return cls(
            scope=scope,
            tasks=tasks.tasks,
            tokens=spans.tokens,
            latency_by_kind=spans.latency_by_kind,
            models=spans.models,
            tools=spans.tools,
            approvals=tasks.approvals,
        )


def nearest_rank(sorted_values: list[float], percent: int) -> float | None:
    """The ``percent``-th percentile of ascending ``sorted_values`` by nearest rank.

    The reference for stores that compute it elsewhere (in SQL): the ⌈percent·n/100⌉-th
    smallest value, ``None`` for no values.
    """
    if not sorted_values:
        return None
    rank = -(-percent * len(sorted_values) // 100)
    return sorted_values[max(rank, 1) - 1]
