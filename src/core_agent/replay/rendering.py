"""How trajectories, comparisons and reruns read in a terminal.

Text from models and tools passes through ``printable`` (no terminal escapes) and wraps
under its step instead of being cut; a long tool result is shown up to ``RESULT_CHARS``
with how much was left out (``--json`` has it whole).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core_agent.contracts.llm_gateway import TOKEN_LIMIT_FINISH_REASONS
from core_agent.safety.terminal_text import printable

if TYPE_CHECKING:
    from rich.console import Console

    from core_agent.replay.comparison import StepDifference, TrajectoryComparison
    from core_agent.replay.fork import ForkResult
    from core_agent.replay.rerun import RerunReport
    from core_agent.replay.trajectory import ReplayStep, Trajectory

RESULT_CHARS = 2000
"""A tool result or answer longer than this is shown up to here."""

LABELS = {
    "route": "route",
    "fallback": "fallback",
    "plan": "plan",
    "plan_step": "plan step",
    "plan_step_done": "step done",
    "node": "node",
    "node_done": "node done",
    "model": "model",
    "model_failed": "model failed",
    "tool_call": "tool call",
    "handoff": "handoff",
    "hook": "hook",
    "policy": "policy",
    "approval_request": "asked human",
    "approval": "human",
    "tool_result": "tool result",
    "injection": "injection?",
    "tainted": "tainted",
    "retrieval": "retrieval",
    "memory": "memory",
    "waiting": "waiting",
    "resumed": "resumed",
    "answer": "answer",
    "failed": "failed",
    "canceled": "canceled",
}
STYLES = {
    "route": "dim",
    "model": "blue",
    "model_failed": "red",
    "tool_call": "cyan",
    "handoff": "cyan",
    "policy": "dim",
    "approval_request": "yellow",
    "approval": "yellow",
    "tool_result": "green",
    "retrieval": "magenta",
    "memory": "magenta",
    "answer": "bold green",
    "failed": "bold red",
    "canceled": "red",
    "injection": "red",
}


def _clipped(text: str, limit: int = RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _call(call: dict[str, Any]) -> str:
    arguments = _json(call["arguments"]) if call["arguments"] is not None else call["raw_arguments"]
    return f"{call['name']}({arguments or ''})"


def step_text(step: ReplayStep) -> str:
    """What a step did, in words (several lines for a model turn with text and calls)."""
    data = step.data
    kind = step.kind
    if kind == "route":
        return f"{data['strategy']}: {data['reason']}"
    if kind == "fallback":
        return f"{data['from_strategy']} → {data['to_strategy']}: {data['reason']}"
    if kind == "plan":
        goals = "; ".join(f"{s.get('id')}: {s.get('goal')}" for s in data["steps"])
        return f"revision {data['revision']}: {goals}"
    if kind == "plan_step":
        return f"{data['step_id']}: {data['goal']}"
    if kind == "plan_step_done":
        outcome = data["output"] if data["succeeded"] else f"failed: {data['error']}"
        return f"{data['step_id']}: {_clipped(outcome)}"
    if kind == "node":
        return f"{data['node']} (layer {data['layer']})"
    if kind == "node_done":
        if not data["succeeded"]:
            return f"{data['node']}: failed: {_clipped(data['error'])}"
        wrote = ", ".join(data["updated"]) or "nothing"
        jump = f" → {data['jump']}" if data["jump"] else ""
        return f"{data['node']}: wrote {wrote}{jump}"
    if kind == "model":
        usage = data["usage"]
        head = (
            f"{data['model']}  {usage['input_tokens']}→{usage['output_tokens']} tokens  "
            f"{data['latency_ms']:.1f} ms"
        )
        if data.get("finish_reason") in TOKEN_LIMIT_FINISH_REASONS:
            head += "  cut off by the token limit"
        lines = [head]
        if data["content"]:
            lines.append(_clipped(data["content"]))
        lines.extend(f"→ {_call(call)}" for call in data["tool_calls"])
        return "\n".join(lines)
    if kind == "model_failed":
        status = f" (status {data['status_code']})" if data["status_code"] is not None else ""
        return f"{data['model']}  {data['error_type']}{status}: {_clipped(data['error'])}"
    if kind == "tool_call":
        return f"{_call(data)}  [{data['call_id']}]"
    if kind == "hook":
        return f"{data['hook']} {data['action']} {data['tool']}: {data['reason']}"
    if kind == "policy":
        verdict = (
            "denied"
            if data["denied"]
            else "needs approval"
            if data["approval_required"]
            else "allowed"
        )
        taint = ", tainted" if data["tainted"] else ""
        reason = f": {data['reason']}" if data["reason"] else ""
        return f"{data['tool']} {verdict} (risk {data['risk']}, rule {data['rule']}{taint}){reason}"
    if kind == "approval_request":
        subject = data["tool"] or "question"
        return f"{subject} (risk {data['risk']}): {data['reason'] or data['question']}"
    if kind == "approval":
        verdict = f"approved ({data['scope']})" if data["approved"] else "denied"
        who = f" by {data['decided_by']}" if data["decided_by"] else ""
        reason = f": {data['reason']}" if data["reason"] else ""
        return f"{verdict}{who}{reason}"
    if kind == "tool_result":
        marks = [name for name in ("is_error", "untrusted") if data[name]]
        extra = f" ({', '.join(m.removeprefix('is_') for m in marks)})" if marks else ""
        return f"{data['name']}{extra}  {data['latency_ms']:.1f} ms\n{_clipped(data['content'])}"
    if kind == "handoff":
        return f"to {data['agent']} (task {data['child_task_id']}): {_clipped(data['sub_task'])}"
    if kind == "injection":
        return f"{data['tool']}: {', '.join(data['signals'])}"
    if kind == "tainted":
        return f"by {data['source']}" + (f": {data['reason']}" if data["reason"] else "")
    if kind in ("retrieval", "memory"):
        attributes = _clipped(_json(data["attributes"]), 600) if data["attributes"] else ""
        head = f"{data['name']}  {data['latency_ms']:.1f} ms"
        if data["error"]:
            head += f"  error: {data['error']}"
        return f"{head}\n{attributes}" if attributes else head
    if kind == "waiting":
        return f"for a human (request {data['request_id']})"
    if kind == "resumed":
        return data["reason"] or "resumed"
    if kind == "answer":
        return _clipped(data["output"])
    if kind == "failed":
        return f"{data['error_type']}: {data['error']}"
    if kind == "canceled":
        return data["reason"] or "canceled"
    return _json(data)


def _steps_text(console: Console, steps: Sequence[ReplayStep], *, prefix: str = "") -> Any:
    """The steps as lines: number, label, then what happened, wrapped under itself.

    One ``Text`` wrapped step by step (by terminal cells, so Chinese text wraps right): a
    table would measure every cell of every row, several times slower on a long task.
    """
    from rich.text import Text

    number_width = len(str(max((step.number for step in steps), default=0)))
    label_width = max(len(label) for label in LABELS.values())
    lead = f"{prefix} " if prefix else ""
    indent = len(lead) + number_width + 1 + label_width + 1
    width = max(console.width - indent, 20)
    out = Text()
    for step in steps:
        lines = Text(printable(step_text(step))).wrap(console, width)
        for index, line in enumerate(lines):
            if index == 0:
                out.append(lead, style="bold")
                out.append(f"{step.number:>{number_width}} ")
                out.append(f"{LABELS[step.kind]:<{label_width}} ", style=STYLES.get(step.kind, ""))
            else:
                out.append(" " * indent)
            out.append_text(line)
            out.append("\n")
    out.rstrip()
    return out


def _header(trajectory: Trajectory) -> list[str]:
    task = trajectory.task
    request = task.request
    lines = [
        f"task {task.task_id}  {task.status.value}  strategy {task.strategy or '-'}  "
        f"session {task.session_id}  trace {task.trace_id}"
    ]
    metadata = request.metadata
    if "forked_from" in metadata:
        lines.append(f"forked from {metadata['forked_from']} at step {metadata.get('fork_step')}")
    if "replay_of" in metadata:
        lines.append(f"rerun of {metadata['replay_of']} ({metadata.get('replay_tools')} tools)")
    if request.system_prompt:
        lines.append(f"system: {request.system_prompt}")
    lines.append(f"request: {request.task}")
    return lines


def print_trajectory(console: Console, trajectory: Trajectory) -> None:
    """The task's header, its steps numbered in order, and what it cost."""
    for line in _header(trajectory):
        console.print(printable(line), markup=False, highlight=False)
    console.print(_steps_text(console, trajectory.steps))
    usage = trajectory.usage
    cost = "unknown" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    console.print(
        f"{len(trajectory.steps)} steps  ·  tokens {usage.input_tokens} in / "
        f"{usage.output_tokens} out  ·  cost {cost}",
        markup=False,
        style="dim",
    )


def print_diff(console: Console, diff: str) -> None:
    """A unified diff, removed lines red and added ones green."""
    from rich.text import Text

    for line in diff.splitlines():
        style = ""
        if line.startswith(("---", "+++")):
            style = "bold"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("@@"):
            style = "cyan"
        console.print(Text(printable(line), style=style), soft_wrap=True)


def print_difference(
    console: Console,
    difference: StepDifference,
    *,
    a_name: str,
    b_name: str,
    with_diff: bool = True,
) -> None:
    """Both sides of one difference, then (``with_diff``) the diff of what was compared."""
    width = max(len(a_name), len(b_name))
    for name, steps in ((a_name, difference.a), (b_name, difference.b)):
        if steps:
            console.print(_steps_text(console, steps, prefix=name.ljust(width)))
        else:
            console.print(f"{name.ljust(width)} (no step here)", markup=False, style="dim")
    if with_diff:
        print_diff(console, difference.diff)


def _where(difference: StepDifference, a_name: str, b_name: str) -> str:
    sides = [
        f"{name}'s step {steps[0].number}"
        for name, steps in ((a_name, difference.a), (b_name, difference.b))
        if steps
    ]
    return " / ".join(sides)


def _matching(count: int) -> str:
    return f"{count} matching step{'' if count == 1 else 's'}"


def print_comparison(console: Console, comparison: TrajectoryComparison) -> None:
    """Whether two tasks did the same, and else where they part and each later difference."""
    console.print(
        f"A: {comparison.a_task_id}\nB: {comparison.b_task_id}", markup=False, highlight=False
    )
    first = comparison.first_difference
    if first is None:
        console.print(
            f"the same: {_matching(comparison.matching_steps)} (model turns, tool calls and "
            "results, decisions, the answer)",
            markup=False,
            style="green",
        )
        return
    console.print(
        f"they part at {_where(first, 'A', 'B')}, after {_matching(comparison.matching_steps)}:",
        markup=False,
        style="yellow",
    )
    print_difference(console, first, a_name="A", b_name="B")
    blocks = comparison.differences
    if len(blocks) == 1 and blocks[0].a == first.a and blocks[0].b == first.b:
        return
    console.print("from there on, aligned:", markup=False, style="bold")
    for difference in blocks:
        label = {"replace": "differ", "insert": "only in B", "delete": "only in A"}
        console.print(f"── {label[difference.change]}", markup=False, style="bold")
        print_difference(console, difference, a_name="A", b_name="B", with_diff=False)


def print_rerun(console: Console, report: RerunReport) -> None:
    """Whether the rerun reproduced the task, and else where it diverged."""
    console.print(
        f"rerun {report.rerun_task_id} of {report.original_task_id} ({report.tool_results} "
        f"tools; {report.model_answers_replayed} of {report.model_answers_recorded} recorded "
        "model answers played back, no model called)",
        markup=False,
        highlight=False,
    )
    if report.reproduced:
        console.print(
            f"reproduced: {_matching(report.matching_steps)}, the final answer too:",
            markup=False,
            style="green",
        )
        console.print(printable(_clipped(report.output or "")), markup=False)
        return
    first = report.first_difference
    if first is not None:
        console.print(
            f"diverged at {_where(first, 'the recording', 'the rerun')}, after "
            f"{_matching(report.matching_steps)}:",
            markup=False,
            style="yellow",
        )
        print_difference(console, first, a_name="recorded", b_name="rerun")
    if report.extra_model_call:
        console.print(f"model: {report.extra_model_call}", markup=False, style="yellow")
    for refused in report.redacted_calls:
        console.print(f"not run: {printable(_clipped(refused))}", markup=False, style="yellow")
    console.print(f"the rerun ended {report.status.value}", markup=False, style="dim")


def print_fork(console: Console, fork: ForkResult) -> None:
    """Which task the fork is and where it came from (its answer is printed apart)."""
    console.print(
        f"fork {fork.task_id} of {fork.original_task_id} at step {fork.fork_step} "
        f"({fork.copied_events} events copied), then live",
        markup=False,
        highlight=False,
    )
