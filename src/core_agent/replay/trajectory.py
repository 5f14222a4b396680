"""A task's trajectory: what it did, step by step, read from its events and spans alone.

The events hold the whole run (the route, every model turn with its message and usage,
every tool call with its arguments and result, policy decisions, approvals, plan steps, a
workflow's nodes, how it ended); retrieval and memory spans add what was looked up. A
trajectory numbers them as steps, in order. No model is called and no tool runs to build one.

Each step has a ``key``: what must be the same for two runs to have done the same thing
(a call's tool and arguments, a result's text, a decision's verdict), without what always
differs (ids, times, latency, costs). Steps about how humans were reached (waiting, resumed),
what was looked up (retrieval, memory spans) and which child task carried out a call of an
agent (handoff: its own steps are its trajectory) have none: they are shown, not compared.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.trace_store import Span
from shared.agent_protocol import TaskEvent, TaskState, TokenUsage

TRAJECTORY_FORMAT = 1
"""Version of the trajectory's JSON shape (``replay --json``)."""

StepKind = Literal[
    "route",
    "fallback",
    "plan",
    "plan_step",
    "plan_step_done",
    "node",
    "node_done",
    "model",
    "model_failed",
    "tool_call",
    "handoff",
    "hook",
    "policy",
    "approval_request",
    "approval",
    "tool_result",
    "injection",
    "tainted",
    "retrieval",
    "memory",
    "waiting",
    "resumed",
    "answer",
    "failed",
    "canceled",
]

SPAN_STEP_KINDS = frozenset({"retrieval", "memory"})
"""Span kinds shown as steps (the others repeat what the events say)."""


class ReplayStep(BaseModel):
    """One step of a trajectory.

    ``data`` holds everything recorded about it; ``key`` what a comparison checks (``None``:
    shown, not compared); ``source`` the record it comes from (``event <seq>`` or
    ``span <id>``).
    """

    model_config = ConfigDict(frozen=True)

    number: int
    kind: StepKind
    at: datetime
    data: dict[str, Any]
    key: dict[str, Any] | None = None
    source: str = ""


class Trajectory(BaseModel):
    """A task and its steps, in order (``format`` versions this shape)."""

    model_config = ConfigDict(frozen=True)

    format: int = TRAJECTORY_FORMAT
    task: TaskState
    steps: list[ReplayStep] = Field(default_factory=list)

    @property
    def usage(self) -> TokenUsage:
        """What the task used, as stored with it.

        While it has not ended (still running, or left by a crash before its usage was
        stored), its model steps' sum when that is larger.
        """
        stored = self.task.usage
        if self.task.status.is_terminal:
            return stored
        counted = sum(
            (
                TokenUsage.model_validate(step.data["usage"])
                for step in self.steps
                if step.kind == "model"
            ),
            start=TokenUsage(),
        )
        if (
            counted.input_tokens + counted.output_tokens
            > stored.input_tokens + stored.output_tokens
        ):
            return counted
        return stored

    @property
    def compared(self) -> list[ReplayStep]:
        """The steps a comparison checks, in comparison order (``comparison_order``)."""
        return comparison_order(self.steps)


def comparison_order(steps: Sequence[ReplayStep]) -> list[ReplayStep]:
    """The compared steps, each model turn's calls in the order the model asked for them.

    The calls of one turn run at once, so their steps (the call, its policy decision,
    approval, result...) interleave in whatever order they happened to finish: two runs that
    did the same thing may record them in another order. Here the steps of a turn's calls
    follow the turn's list of calls, each call's steps in their own order; steps of no call
    keep their place after them.
    """
    ordered: list[ReplayStep] = []
    turn: list[ReplayStep] = []
    calls: dict[str, int] = {}
    requests: dict[str, str] = {}

    def close() -> None:
        position = {id(step): n for n, step in enumerate(turn)}

        def rank(step: ReplayStep) -> tuple[int, int]:
            call = _call_of(step, requests)
            index = calls.get(call, len(calls)) if call is not None else len(calls)
            return index, position[id(step)]

        ordered.extend(sorted(turn, key=rank))
        turn.clear()

    for step in steps:
        if step.key is None:
            continue
        if step.kind == "model":
            close()
            ordered.append(step)
            calls = {call["id"]: n for n, call in enumerate(step.data["tool_calls"])}
            continue
        if step.kind == "approval_request" and step.data["call_id"] is not None:
            requests[step.data["request_id"]] = step.data["call_id"]
        turn.append(step)
    close()
    return ordered


def _call_of(step: ReplayStep, requests: dict[str, str]) -> str | None:
    """The tool call a step belongs to, if any."""
    if step.kind == "approval":
        return requests.get(step.data["request_id"])
    call: str | None = step.data.get("call_id")
    return call


def _call(call: Any) -> dict[str, Any]:
    return {
        "id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "raw_arguments": call.raw_arguments if call.arguments is None else None,
    }


def _usage(usage: Any) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
    }


def _pick(data: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: data.get(name) for name in names}


def step_key(kind: StepKind, data: dict[str, Any]) -> dict[str, Any] | None:
    """What two runs must share at a step of ``kind`` to have done the same thing."""
    if kind == "route":
        return _pick(data, "strategy")
    if kind == "fallback":
        return _pick(data, "from_strategy", "to_strategy")
    if kind == "plan":
        return _pick(data, "steps")
    if kind == "plan_step":
        return _pick(data, "step_id", "goal")
    if kind == "plan_step_done":
        return _pick(data, "step_id", "succeeded", "output", "error")
    if kind == "node":
        return _pick(data, "node", "layer")
    if kind == "node_done":
        return _pick(data, "node", "layer", "succeeded", "updated", "jump", "error")
    if kind == "model":
        calls = [
            {"name": c["name"], "arguments": c["arguments"], "raw_arguments": c["raw_arguments"]}
            for c in data["tool_calls"]
        ]
        return {"content": data["content"], "tool_calls": calls}
    if kind == "model_failed":
        return _pick(data, "error_type", "error")
    if kind == "tool_call":
        return _pick(data, "name", "arguments", "raw_arguments")
    if kind == "hook":
        return _pick(data, "tool", "hook", "action", "arguments")
    if kind == "policy":
        return _pick(data, "tool", "risk", "rule", "denied", "approval_required", "tainted")
    if kind == "approval_request":
        return _pick(data, "tool", "arguments", "question", "risk", "rule")
    if kind == "approval":
        return _pick(data, "approved", "scope")
    if kind == "tool_result":
        return _pick(data, "name", "content", "is_error", "error_type")
    if kind == "injection":
        return _pick(data, "tool", "signals")
    if kind == "tainted":
        return _pick(data, "source")
    if kind == "answer":
        return _pick(data, "output")
    if kind == "failed":
        return _pick(data, "error_type", "error")
    if kind == "canceled":
        return _pick(data, "reason")
    # retrieval, memory, waiting, resumed, and handoff (how a call of an agent was carried
    # out: its call and result are compared; a rerun that plays it back runs no child):
    # shown, not compared
    return None


class TrajectoryBuilder:
    """Turns a task's events into steps, one event at a time (for a run being watched too).

    A call that waits for a human is announced twice (before it is asked about, and when it
    starts after the answer): the second announcement is not a step of its own.

    Call ids are the model's and need not be unique: the steps of a plan run side by side
    each number their calls from the start, and a model may give two calls one id. So a call
    is known by its id, tool and arguments together: each call a model turn asked for is one
    step when it is first announced (two identical ones, two steps, in order), and only an
    announcement beyond what the turns asked for, of a call still open, is a repeat.
    """

    def __init__(self) -> None:
        self.steps: list[ReplayStep] = []
        self._asked: Counter[_CallIdentity] = Counter()
        """Calls the model turns asked for so far."""
        self._announced: Counter[_CallIdentity] = Counter()
        """Of those, the ones announced (a step made)."""
        self._open: Counter[_CallIdentity] = Counter()
        """Calls announced whose result has not come yet."""

    def add(self, event: TaskEvent) -> list[ReplayStep]:
        """The steps ``event`` makes (none for bookkeeping events), appended to ``steps``."""
        made = [
            ReplayStep(
                number=len(self.steps) + 1,
                kind=kind,
                at=event.occurred_at,
                data=data,
                key=step_key(kind, data),
                source=f"event {event.seq}",
            )
            for kind, data in self._read(event)
        ]
        self.steps.extend(made)
        return made

    def _read(self, event: TaskEvent) -> list[tuple[StepKind, dict[str, Any]]]:
        data: Any = event
        kind = event.kind
        if kind == "task.strategy_selected":
            return [
                (
                    "route",
                    {"strategy": data.strategy, "reason": data.reason, "features": data.features},
                )
            ]
        if kind == "task.strategy_fallback":
            return [
                (
                    "fallback",
                    {
                        "from_strategy": data.from_strategy,
                        "to_strategy": data.to_strategy,
                        "reason": data.reason,
                    },
                )
            ]
        if kind == "plan.created":
            return [("plan", {"revision": data.revision, "steps": data.steps})]
        if kind == "plan.step_started":
            return [("plan_step", {"step_id": data.step_id, "goal": data.goal})]
        if kind == "plan.step_completed":
            return [
                (
                    "plan_step_done",
                    {
                        "step_id": data.step_id,
                        "succeeded": data.succeeded,
                        "output": data.output,
                        "error": data.error,
                    },
                )
            ]
        if kind == "agent.handoff":
            # The child's own steps are its trajectory (``replay <child_task_id>``).
            return [
                (
                    "handoff",
                    {
                        "agent": data.agent,
                        "sub_task": data.sub_task,
                        "child_task_id": data.child_task_id,
                        "call_id": data.call_id,
                    },
                )
            ]
        if kind == "workflow.node_started":
            return [("node", {"node": data.node, "layer": data.layer})]
        if kind == "workflow.node_finished":
            return [
                (
                    "node_done",
                    {
                        "node": data.node,
                        "layer": data.layer,
                        "succeeded": data.succeeded,
                        "updated": list(data.updated),
                        "jump": data.jump,
                        "error": data.error,
                    },
                )
            ]
        if kind == "llm.completed":
            message = data.message
            self._asked.update(_identity(call) for call in message.tool_calls)
            return [
                (
                    "model",
                    {
                        "model": data.model,
                        "content": message.content,
                        "tool_calls": [_call(call) for call in message.tool_calls],
                        "usage": _usage(data.usage),
                        "latency_ms": round(data.latency_ms, 3),
                        "finish_reason": data.finish_reason,
                    },
                )
            ]
        if kind == "llm.failed":
            return [
                (
                    "model_failed",
                    {
                        "model": data.model,
                        "error_type": data.error_type,
                        "error": data.error,
                        "status_code": data.status_code,
                        "latency_ms": round(data.latency_ms, 3),
                    },
                )
            ]
        if kind == "tool.started":
            call = data.tool_call
            identity = _identity(call)
            if self._announced[identity] < self._asked[identity]:
                self._announced[identity] += 1
            elif self._open[identity]:
                return []  # started again after a human's answer: the same call
            self._open[identity] += 1
            return [("tool_call", {**_call(call), "call_id": call.id})]
        if kind == "tool.hook_applied":
            return [("hook", _pick(data.model_dump(mode="json"), *_HOOK_FIELDS))]
        if kind == "policy.decided":
            return [
                (
                    "policy",
                    {
                        "call_id": data.call_id,
                        "tool": data.tool,
                        "risk": data.risk.value,
                        "rule": data.rule,
                        "denied": data.denied,
                        "approval_required": data.approval_required,
                        "tainted": data.tainted,
                        "reason": data.reason,
                    },
                )
            ]
        if kind == "approval.requested":
            request = data.request
            call = request.tool_call
            return [
                (
                    "approval_request",
                    {
                        "request_id": request.request_id,
                        "call_id": call.id if call else None,
                        "tool": call.name if call else None,
                        "arguments": call.arguments if call else None,
                        "question": request.question,
                        "risk": request.risk.value,
                        "rule": request.rule,
                        "reason": request.reason,
                    },
                )
            ]
        if kind == "approval.resolved":
            decision = data.decision
            return [
                (
                    "approval",
                    {
                        "request_id": decision.request_id,
                        "approved": decision.approved,
                        "scope": decision.scope,
                        "reason": decision.reason,
                        "decided_by": decision.decided_by,
                    },
                )
            ]
        if kind == "tool.completed":
            result = data.result
            for identity in self._open:
                if identity[:2] == (result.call_id, result.name) and self._open[identity]:
                    self._open[identity] -= 1
                    break
            return [
                (
                    "tool_result",
                    {
                        "call_id": result.call_id,
                        "name": result.name,
                        "content": result.content,
                        "is_error": result.is_error,
                        "error_type": result.error_type,
                        "untrusted": data.untrusted,
                        "latency_ms": round(data.latency_ms, 3),
                    },
                )
            ]
        if kind == "safety.injection_suspected":
            return [
                (
                    "injection",
                    {
                        "call_id": data.call_id,
                        "tool": data.tool,
                        "signals": list(data.signals),
                        "score": data.score,
                    },
                )
            ]
        if kind == "task.tainted":
            return [
                ("tainted", {"source": data.source, "call_id": data.call_id, "reason": data.reason})
            ]
        if kind == "task.waiting_approval":
            return [("waiting", {"request_id": data.request_id})]
        if kind == "task.resumed":
            return [("resumed", {"reason": data.reason, "owner": data.owner})]
        if kind == "task.succeeded":
            return [("answer", {"output": data.output, "usage": _usage(data.usage)})]
        if kind == "task.failed":
            return [
                (
                    "failed",
                    {
                        "error_type": data.error_type,
                        "error": data.error,
                        "usage": _usage(data.usage),
                    },
                )
            ]
        if kind == "task.canceled":
            return [("canceled", {"reason": data.reason, "usage": _usage(data.usage)})]
        return []  # task.queued (the header), task.started, text deltas


_HOOK_FIELDS = ("call_id", "tool", "hook", "action", "reason", "arguments")

_CallIdentity = tuple[str, str, str]
"""A call's id, tool and arguments (as canonical JSON, or the raw text the model sent)."""


def _identity(call: Any) -> _CallIdentity:
    if call.arguments is None:
        arguments = f"raw:{call.raw_arguments}"
    else:
        arguments = json.dumps(call.arguments, sort_keys=True, default=str)
    return call.id, call.name, arguments


def span_step_data(span: Span) -> dict[str, Any]:
    """What a retrieval or memory span tells, as a step's data."""
    return {
        "name": span.name,
        "status": span.status,
        "latency_ms": round(span.latency_ms, 3),
        "error": span.error,
        "attributes": json.loads(json.dumps(span.attributes, default=str)),
        "span_id": span.span_id,
    }


def build_trajectory(
    task: TaskState, events: Sequence[TaskEvent], spans: Iterable[Span] = ()
) -> Trajectory:
    """The task's trajectory from its stored events and spans.

    Retrieval and memory spans are placed among the events by their start time (a search a
    tool made comes between the call and its result).
    """
    builder = TrajectoryBuilder()
    for event in events:
        builder.add(event)
    steps = list(builder.steps)
    shown = sorted(
        (span for span in spans if span.kind in SPAN_STEP_KINDS), key=lambda s: s.started_at
    )
    if shown:
        # Event times only rise (should the clock step back, the running maximum keeps order).
        times: list[datetime] = []
        for step in steps:
            times.append(max(step.at, times[-1]) if times else step.at)
        before: dict[int, list[ReplayStep]] = {}
        for span in shown:
            kind: StepKind = "retrieval" if span.kind == "retrieval" else "memory"
            step = ReplayStep(
                number=0, kind=kind, at=span.started_at, data=span_step_data(span),
                source=f"span {span.span_id}",
            )  # fmt: skip
            # Before the first event that happened after the span started.
            before.setdefault(bisect.bisect_right(times, span.started_at), []).append(step)
        merged: list[ReplayStep] = []
        for index, step in enumerate(steps):
            merged.extend(before.get(index, ()))
            merged.append(step)
        merged.extend(before.get(len(steps), ()))
        steps = merged
    numbered = [
        step if step.number == n else step.model_copy(update={"number": n})
        for n, step in enumerate(steps, start=1)
    ]
    return Trajectory(task=task, steps=numbered)
