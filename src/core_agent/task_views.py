"""How one task is shown in a terminal: its conversation (``show``) and its span tree (``trace``).

The conversation's lines (``conversation_lines``) are also what the trace viewer shows.

Both read only what the stores kept (the task's events and spans), so they show a task that
ran in another process, or one that is still waiting for a human. Text from models and tools
passes through ``printable`` (no terminal escapes) and wraps to the terminal instead of being
cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core_agent.contracts.trace_store import CONTENT_ATTRIBUTES
from core_agent.observability.span_tree import span_tree
from core_agent.safety.terminal_text import printable

if TYPE_CHECKING:
    from rich.console import Console

    from core_agent.contracts.trace_store import Span
    from shared.agent_protocol import TaskEvent, TaskState

RESULT_CHARS = 2000
"""A tool result longer than this is shown up to here, with how much was left out."""


def _arguments(call: Any) -> str:
    if call.arguments is not None:
        return json.dumps(call.arguments, ensure_ascii=False)
    return str(call.raw_arguments or "")


def _clipped(text: str, limit: int = RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


@dataclass(frozen=True, slots=True)
class ConversationLine:
    """One line of a task's conversation: who speaks, what they say, and its colour.

    ``style`` is a terminal colour (``green`` the user and answers, ``blue`` the model,
    ``cyan`` calls and plan steps, ``yellow`` humans and waits, ``red`` failures, ``dim``
    decisions, ``magenta`` the system prompt); the trace viewer uses it as a CSS class.
    """

    who: str
    text: str
    style: str = ""


def conversation_lines(events: Sequence[TaskEvent]) -> list[ConversationLine]:
    """The task as a conversation, one line per thing that happened, in order.

    The request, each model turn, each call with its policy decision, approval and result,
    plan steps, and how it ended. The text is as stored (not made printable).
    """
    lines: list[ConversationLine] = []

    def say(who: str, text: str, style: str = "") -> None:
        lines.append(ConversationLine(who, text, style))

    for event in events:
        data: Any = event
        kind = event.kind
        if kind == "task.queued":
            if data.request.system_prompt:
                say("system:", data.request.system_prompt, "magenta")
            say("user:", data.request.task, "green")
        elif kind == "task.strategy_selected":
            say("strategy:", f"{data.strategy} ({data.reason})", "dim")
        elif kind == "task.strategy_fallback":
            say("fallback:", f"{data.from_strategy} → {data.to_strategy}: {data.reason}", "yellow")
        elif kind == "plan.created":
            steps = "; ".join(f"{step['id']}: {step['goal']}" for step in data.steps)
            say(f"plan r{data.revision}:", steps, "cyan")
        elif kind == "plan.step_started":
            say(f"step {data.step_id}:", data.goal, "cyan")
        elif kind == "plan.step_completed":
            outcome = data.output if data.succeeded else f"failed: {data.error}"
            say(f"step {data.step_id} done:", outcome, "cyan")
        elif kind == "llm.completed":
            message = data.message
            if message.content:
                say("assistant:", message.content, "blue")
            for call in message.tool_calls:
                say("  call:", f"{call.name}({_arguments(call)})  [{call.id}]", "cyan")
        elif kind == "llm.failed":
            say("model failed:", f"{data.error_type}: {data.error}", "red")
        elif kind == "policy.decided":
            verdict = (
                "denied"
                if data.denied
                else "needs approval"
                if data.approval_required
                else "allowed"
            )
            taint = ", tainted" if data.tainted else ""
            say(
                "  policy:",
                f"{data.tool} {verdict} (risk {data.risk.value}, rule {data.rule}{taint})"
                + (f": {data.reason}" if data.reason else ""),
                "dim",
            )
        elif kind == "approval.requested":
            say("  asked a human:", data.request.reason or data.request.question or "", "yellow")
        elif kind == "approval.resolved":
            decision = data.decision
            answer = "approved" if decision.approved else "denied"
            say(
                "  human:",
                f"{answer} ({decision.scope})"
                + (f": {decision.reason}" if decision.reason else ""),
                "yellow",
            )
        elif kind == "tool.hook_applied":
            say("  hook:", f"{data.hook} {data.action} {data.tool}: {data.reason}", "dim")
        elif kind == "safety.injection_suspected":
            say("  injection?", f"{data.tool}: {', '.join(data.signals)}", "red")
        elif kind == "tool.completed":
            result = data.result
            style = "red" if result.is_error else "green"
            origin = ", untrusted" if getattr(data, "untrusted", False) else ""
            say(f"  result ({result.name}{origin}):", _clipped(result.content), style)
        elif kind == "task.waiting_approval":
            say("waiting:", f"for a human (request {data.request_id})", "yellow")
        elif kind == "task.succeeded":
            say("answer:", data.output, "green")
        elif kind == "task.failed":
            say("failed:", f"{data.error_type}: {data.error}", "red")
        elif kind == "task.canceled":
            say("canceled:", data.reason, "red")
    return lines


def print_conversation(console: Console, task: TaskState, events: Sequence[TaskEvent]) -> None:
    """The task as a conversation (``conversation_lines``), between its ids and its usage."""
    from rich.markup import escape

    console.print(
        f"task {task.task_id}  {task.status.value}  session {task.session_id}  "
        f"trace {task.trace_id}",
        markup=False,
        style="dim",
    )
    for line in conversation_lines(events):
        # Markup only in the label; the text is shown as it is (escaped), and it wraps.
        label = f"[bold {line.style}]{line.who}[/]" if line.style else f"[bold]{line.who}[/]"
        console.print(f"{label} {escape(printable(line.text))}")
    usage = task.usage
    cost = "unknown" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    console.print(
        f"tokens {usage.input_tokens} in / {usage.output_tokens} out, cost {cost}",
        markup=False,
        style="dim",
    )


def _span_line(span: Span) -> str:
    parts = [f"{span.kind} {printable(span.name, newlines=False)}", f"{span.latency_ms:.1f} ms"]
    if span.status != "ok":
        parts.append(span.status)
    if span.tokens_in is not None or span.tokens_out is not None:
        parts.append(f"tokens {span.tokens_in or 0}/{span.tokens_out or 0}")
    if span.cost_usd is not None:
        parts.append(f"${span.cost_usd:.6f}")
    line = "  ·  ".join(parts)
    # The content (prompts, answers, arguments, results) is only named here: `--json` has it.
    shown = {
        key: value
        for key, value in span.attributes.items()
        if key not in CONTENT_ATTRIBUTES and key != "session_id"
    }
    content = [key for key in span.attributes if key in CONTENT_ATTRIBUTES]
    if content:
        shown["content"] = content
    detail = span.error or (json.dumps(shown, default=str, ensure_ascii=False) if shown else "")
    return f"{line}\n{printable(detail)}" if detail else line


def print_span_tree(console: Console, task: TaskState, spans: Sequence[Span]) -> None:
    """The spans as a tree (children under their parent, in start order) with durations.

    A span whose parent is not stored (the task's root before the task ends, or after a
    crash), or whose parents form a loop, hangs under the title (``span_tree``).
    """
    from rich.text import Text
    from rich.tree import Tree

    title = Text(
        f"trace {task.trace_id} (task {task.task_id}, {task.status.value}, "
        f"session {task.session_id})"
    )
    tree = Tree(title)
    nodes: list[Any] = [tree]  # the node of each depth on the way down
    for span, depth in span_tree(spans):
        del nodes[depth + 1 :]
        style = "red" if span.status == "error" else ""
        nodes.append(nodes[depth].add(Text(_span_line(span), style=style)))
    console.print(tree)
