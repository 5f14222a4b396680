"""Port for spans: the timed, costed record of every step of a task."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from core_agent.contracts.metrics import MetricsScope, SpanMetrics

SpanKind = Literal[
    "task",
    "run",
    "planning",
    "step",
    "llm",
    "llm_attempt",
    "tool",
    "hook",
    "policy",
    "approval",
    "memory",
    "retrieval",
]
"""What a span times. ``task``: the root of a task's tree, from its creation to its end
(written when it ends). ``run``: one run of the task's executor in one process; a task that
waited for a human, or was resumed after a crash, has several. ``llm_attempt``: one request
of a model call (a child of its ``llm`` span); a call that was retried or fell back to another
model has several. ``hook``: one host tool hook before or after a call (a child of the call's
``tool`` span)."""
SpanStatus = Literal["ok", "error"]

DEFAULT_CONTENT_MAX_CHARS = 4000
CUT_MARK = "… [{count} more characters not recorded]"


def cut_text(text: str, max_chars: int) -> str:
    """How a span keeps a text longer than its cap: the head, then how much was left out."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + CUT_MARK.format(count=len(text) - max_chars)


CONTENT_ATTRIBUTES = frozenset(
    {
        "input_messages",
        "output_message",
        "arguments",
        "rewritten_arguments",
        "result",
        "query",
        "passages",
        "memories",
        "context",
        "summary",
    }
)
"""Span attributes that hold what a step saw or said (written only with content recording):
``llm``: ``input_messages`` (the messages added to the conversation since the previous model
call of the same conversation; ``input_messages_from`` says where they start) and
``output_message``; ``tool``: ``arguments`` and ``result``; ``hook``: ``arguments`` (a
rewrite); ``retrieval``: ``query`` and ``passages``, or ``context`` (a capability's);
``memory``: ``query`` and ``memories`` (recall), ``summary`` (compaction)."""

CONTENT_FREE_ATTRIBUTES = frozenset(
    {
        # timing, usage and ids
        "attempt",
        "attempts",
        "cache_read_tokens",
        "call_hash",
        "call_id",
        "child_task_id",
        "folded_through_seq",
        "input_messages_from",
        "interrupted_before",
        "request_id",
        "retried_input_tokens",
        "retried_output_tokens",
        "reasoning_tokens",
        "retry_after_s",
        "session_id",
        "status_code",
        "summary_through_seq",
        "summary_tokens",
        "tokens_before",
        "usage_estimated",
        "wait_s",
        # sizes and counts
        "budget_tokens",
        "calls",
        "chars",
        "folded_turns",
        "history_tokens",
        "k",
        "messages_sent",
        "omitted_messages",
        "output_chars",
        "requested",
        "truncated_from_chars",
        "turn",
        "turns_omitted",
        "turns_sent",
        "window_tokens",
        # decisions, and the names the host or the kernel gave
        "action",
        "agent",
        "approval_required",
        "approved",
        "confinement",
        "decided_by",
        "denied",
        "depends_on",
        "error_type",
        "fallback",
        "fallback_model",
        "features",
        "finish_reason",
        "forced",
        "hits",
        "hook_blocked",
        "hook_rewrites",
        "injection_signals",
        "jump",
        "layer",
        "limits",
        "model",
        "namespace",
        "network",
        "node",
        "node_kind",
        "outcome",
        "phase",
        "purpose",
        "recalled",
        "resumed",
        "revision",
        "risk",
        "rule",
        "scope",
        "skipped",
        "status",
        "steps",
        "strategy",
        "suspended",
        "tainted",
        "task_status",
        "tool_calls",
        "untrusted_output",
        "updated",
        "usage_limit",
        "workflow",
    }
)
"""The span attributes a store keeps without content recording (``AGENT_TRACE_CONTENT``
false): timing, usage, ids, counts and decisions, whose values the kernel builds from its own
names, the host's and the registry's, never from what a step saw or said. Every other
attribute is dropped then, whatever wrote it, so one that quotes a prompt, a reply, a
human's or a hook's words (``reason``, say) cannot reach the store or an exporter by a
writer forgetting to check; one the kernel adds must be listed here (or in
``CONTENT_ATTRIBUTES``, or ``COUNTED_ATTRIBUTES``) to be kept."""

COUNTED_ATTRIBUTES = frozenset({"failures", "hook_errors", "refusals", "unproven"})
"""Span attributes that hold texts with content recording (a plan-and-execute run's
``failures``, a planner's ``refusals``, a tool call's ``hook_errors``, a policy's
``unproven`` clauses) and, without it, how many there were: kept then only as a count."""

UNKNOWN_TOOL = "unknown_tool"
"""The name a call of a tool the registry does not know has in spans without content
recording: the name is the model's words (it may be anything)."""


@dataclass(frozen=True, slots=True)
class TraceRecording:
    """What the kernel's tracers write to a trace store.

    Attributes:
        spans: Whether spans are written at all (``AGENT_TRACING``).
        content: Whether spans hold the content of the steps: the messages sent to a model
            and its answer, a tool call's arguments and result, a retrieval's query and
            passages (``AGENT_TRACE_CONTENT``).
        content_max_chars: The longest text a span keeps (``AGENT_TRACE_CONTENT_MAX_CHARS``);
            longer text keeps its head and says how much was left out.
    """

    spans: bool = True
    content: bool = True
    content_max_chars: int = DEFAULT_CONTENT_MAX_CHARS


@dataclass(frozen=True, slots=True)
class Span:
    """One finished step. Spans are written whole, when the step ends, never half."""

    span_id: str
    trace_id: str
    task_id: str
    kind: SpanKind
    name: str
    started_at: datetime
    ended_at: datetime
    status: SpanStatus = "ok"
    parent_span_id: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    error: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def latency_ms(self) -> float:
        """Wall time of the step in milliseconds."""
        return (self.ended_at - self.started_at).total_seconds() * 1000.0


class ITraceStore(abc.ABC):
    """Persists spans for inspection and replay.

    Methods are awaitable and keep blocking I/O off the event loop. Failures raise
    ``StorageError``; a failed write leaves no partial span.
    """

    @property
    def recording(self) -> TraceRecording:
        """What tracers should write here; a store that keeps everything need not override it.

        Read once per task step by the tracers: must not block.
        """
        return TraceRecording()

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """Queue ``callback`` for once the span written just before is durable.

        A store whose writes join a unit of work (a step's, a task's ending) holds them until
        it commits; what acts on a stored span (an exporter) waits for that, so it never acts
        on a span that was then left out. Returns ``False`` when nothing is held (the caller
        runs it now). This default holds nothing back.
        """
        return False

    @abc.abstractmethod
    async def record(self, span: Span) -> None:
        """Persist one finished span.

        Raises:
            StorageError: Nothing was written.
        """

    @abc.abstractmethod
    async def list_spans(
        self, *, task_id: str | None = None, trace_id: str | None = None
    ) -> list[Span]:
        """Spans of a task or a trace, ordered by start time (then insertion).

        Raises:
            UsageError: Neither ``task_id`` nor ``trace_id`` was given.
        """

    @abc.abstractmethod
    async def span_metrics(self, scope: MetricsScope) -> SpanMetrics:
        """Tokens, cost, latencies, models and tools of the spans of the tasks in ``scope``.

        The tasks are those of the task store this store keeps spans for (a store in the
        same database reads its tasks table), selected as ``MetricsScope`` says. Counted:

        - ``tokens``: the sum over every span but ``task`` and ``run`` (a task's root span
          and each run's repeat the sum of their model calls) and ``llm_attempt`` (its
          ``llm`` span carries the usage).
        - ``latency_by_kind``: the latency percentiles of the spans of each kind.
        - ``models``: ``llm`` spans by the model that answered (the ``fallback_model``
          attribute, else the span's name): calls, errors, tokens, cost, latency.
        - ``tools``: ``tool`` spans by name, leaving out those written when the call was
          suspended for a human (``suspended`` attribute; the call writes another span when
          it is resumed); ``refused`` when the ``error_type`` attribute is in
          ``REFUSED_ERROR_TYPES``, else ``errors`` when the span's status is ``error``.

        Percentiles are nearest-rank (see ``core_agent.contracts.metrics``). A store should
        compute this where the spans are (SQL aggregates over indexes), not by reading every
        span into the process; it may take a while on a large store, and must not block the
        event loop meanwhile.

        Raises:
            StorageError: The spans cannot be read.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
