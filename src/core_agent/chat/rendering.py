"""How a turn looks: the answer as Markdown while it streams, each tool call on one line.

The model's text is drawn with rich's ``Live`` as it comes, as Markdown; a block the text has
finished is printed for good once the drawing would not fit the screen, so a long answer
scrolls instead of being redrawn. A tool call is one line when it starts and one when it ends,
numbered for the whole chat: ``/show N`` (``ToolCallLog``) prints its arguments and result
whole. Everything the model or a tool wrote goes through ``printable`` first: escape
sequences are shown, never sent to the terminal.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.text import Text

from core_agent.chat.model_text import ModelText
from core_agent.safety.terminal_text import printable
from shared.agent_protocol import (
    AgentEvent,
    LLMCompleted,
    LLMDelta,
    LLMFailed,
    PlanCreated,
    PlanStepStarted,
    StrategyFallback,
    TaskCanceled,
    TaskFailed,
    TaskSucceeded,
    TokenUsage,
    ToolCall,
    ToolCompleted,
    ToolResult,
    ToolStarted,
)

REDRAWS_PER_SECOND = 15
"""At most this many redraws of the streaming answer: drawing Markdown costs more than a
token arrives."""


@dataclass
class LoggedCall:
    """A tool call of this chat, with its result once it came."""

    number: int
    call: ToolCall
    result: ToolResult | None = None
    untrusted: bool = False
    """The model got the result as untrusted data (``ToolCompleted.untrusted``)."""


class ToolCallLog:
    """Every tool call of the chat, numbered from 1, for ``/show N`` and ``/last``."""

    def __init__(self) -> None:
        self._calls: list[LoggedCall] = []
        self._by_id: dict[str, LoggedCall] = {}

    def started(self, call: ToolCall) -> LoggedCall:
        """Number ``call``; a call seen before keeps its number.

        A call that waited for a human is announced twice: when it is asked about, and when
        it starts after the answer.
        """
        known = self._by_id.get(call.id)
        if known is not None:
            return known
        logged = LoggedCall(len(self._calls) + 1, call)
        self._calls.append(logged)
        self._by_id[call.id] = logged
        return logged

    def completed(self, result: ToolResult, *, untrusted: bool = False) -> LoggedCall | None:
        """Attach ``result`` to its call (``None`` for a call this chat did not see start)."""
        logged = self._by_id.get(result.call_id)
        if logged is not None:
            logged.result, logged.untrusted = result, untrusted
        return logged

    def get(self, number: int) -> LoggedCall | None:
        """Call ``number``, if there is one."""
        return self._calls[number - 1] if 1 <= number <= len(self._calls) else None

    def last(self) -> LoggedCall | None:
        """The newest call."""
        return self._calls[-1] if self._calls else None

    def __len__(self) -> int:
        return len(self._calls)


def arguments_text(call: ToolCall, *, indent: int | None = None) -> str:
    """The call's arguments as JSON (as the model sent them, when they did not parse)."""
    if call.arguments is not None:
        return json.dumps(call.arguments, ensure_ascii=False, indent=indent)
    return call.raw_arguments or ""


def show_call(console: Console, logged: LoggedCall) -> None:
    """A call's arguments and result, whole (``/show``)."""
    call, result = logged.call, logged.result
    console.print(f"[{logged.number}] {printable(call.name)}", style="bold cyan", markup=False)
    console.print("arguments:", style="dim")
    # Soft wrap: the terminal folds long lines, and a copied value stays whole.
    console.print(
        printable(arguments_text(call, indent=2)), markup=False, highlight=False, soft_wrap=True
    )
    if result is None:
        console.print("result: (none: it did not finish)", style="dim")
        return
    label = f"error ({result.error_type or 'error'})" if result.is_error else "result"
    if logged.untrusted:
        label += " (untrusted: the model was told not to follow instructions in it)"
    console.print(f"{label}:", style="red" if result.is_error else "dim")
    console.print(printable(result.content), markup=False, highlight=False, soft_wrap=True)


def money(cost: float | None) -> str:
    """``$0.0123``, or ``cost unknown`` (a model with no known price)."""
    return "cost unknown" if cost is None else f"${cost:.4f}"


def usage_line(turn: TokenUsage, session: TokenUsage) -> str:
    """The line after a turn: its tokens and cost, then the session's."""
    return (
        f"{turn.input_tokens:,} in · {turn.output_tokens:,} out · {money(turn.cost_usd)}"
        f"   session: {session.input_tokens:,} in · {session.output_tokens:,} out · "
        f"{money(session.cost_usd)}"
    )


def one_line(console: Console, text: str, style: str = "") -> None:
    """``text`` on one line, cut with an ellipsis at the console's width."""
    line = Text(printable(text, newlines=False), style=style)
    console.print(line, no_wrap=True, overflow="ellipsis", crop=True)


def _finished_blocks(text: str) -> int:
    """Where the blocks ``text`` has finished end: after its last blank line outside code."""
    fence: str | None = None
    end = offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if fence is None and stripped[:3] in ("```", "~~~"):
            fence = stripped[:3]
        elif fence is not None and stripped.startswith(fence):
            fence = None
        elif fence is None and not stripped and line.endswith("\n"):
            end = offset + len(line)
        offset += len(line)
    return end


class StreamingAnswer:
    """The text of one model answer, redrawn while it grows: as Markdown, or as plain text."""

    def __init__(self, console: Console, *, markdown: bool = True) -> None:
        self._console = console
        self._as_markdown = markdown
        self._live: Live | None = None
        self._text = ""
        self._drawn_at = 0.0

    @property
    def text(self) -> str:
        """What is still being drawn (not yet printed for good)."""
        return self._text

    def add(self, piece: str) -> None:
        """Add ``piece`` to the text; a terminal sees it drawn (a few times a second at most)."""
        self._text += piece
        if not self._console.is_terminal:
            return  # a file or a pipe: drawn once, when it is finished
        if self._live is None:
            self._live = Live(
                console=self._console,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        if self._too_tall():
            end = _finished_blocks(self._text)
            if end:
                done, self._text = self._text[:end], self._text[end:]
                self._live.update(self._drawing(done), refresh=True)
                self._live.stop()
                self._live = None
                self._console.line()  # the blank line the split was made at
                if self._text:
                    self.add("")
                return
        now = time.monotonic()
        if now - self._drawn_at >= 1 / REDRAWS_PER_SECOND:
            self._drawn_at = now
            self._live.update(self._drawing(self._text), refresh=True)

    def take_back(self, count: int) -> None:
        """Remove the last ``count`` characters (a model call tried again streams anew).

        Only from what is still being drawn: text already printed for good (an answer taller
        than the screen) stays.
        """
        self._text = self._text[: max(len(self._text) - count, 0)]
        if self._live is not None:
            self._live.update(self._drawing(self._text), refresh=True)

    def finish(self) -> None:
        """Draw the whole text one last time and leave it on the screen."""
        if self._live is not None:
            self._live.update(self._drawing(self._text), refresh=True)
            self._live.stop()
            self._live = None
        elif self._text.strip() and not self._console.is_terminal:
            self._console.print(self._drawing(self._text))
        self._text = ""

    def _too_tall(self) -> bool:
        width = max(self._console.width, 20)
        lines = sum(len(line) // width + 1 for line in self._text.splitlines())
        return lines > max(self._console.height - 4, 4)

    def _drawing(self, text: str) -> Markdown | Text:
        if not self._as_markdown:
            return Text(printable(text))
        return Markdown(printable(text), hyperlinks=False)


class TurnView:
    """Shows one turn's events as they come.

    While the person is asked something (``hold``), events wait and are shown after
    (``release``), so nothing is drawn over the question.
    """

    def __init__(self, console: Console, calls: ToolCallLog) -> None:
        self._console = console
        self._calls = calls
        self._answer = StreamingAnswer(console)
        self._streamed = ModelText()
        """The text since the last tool call or step, to know whether the answer was shown."""
        self._held: list[AgentEvent] | None = None

    def hold(self) -> None:
        """Stop drawing (a question is about to be asked); events wait."""
        self._answer.finish()
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Show the events that waited, and go on drawing."""
        held, self._held = self._held, None
        for event in held or ():
            self.show(event)

    def note(self, text: str, style: str = "yellow") -> None:
        """A line of the chat's own (``canceling…``), after the text drawn so far."""
        if self._held is not None:
            return
        self._answer.finish()
        self._console.print(text, style=style, markup=False)

    def close(self) -> None:
        """Leave what was drawn on the screen."""
        self._answer.finish()

    def show(self, event: AgentEvent) -> None:
        """Draw ``event`` (events a person does not need to see are skipped)."""
        if self._held is not None:
            self._held.append(event)
            return
        if isinstance(event, LLMDelta):
            self._delta(event)
        elif isinstance(event, LLMCompleted | LLMFailed):
            self._streamed.call_ended()
        elif isinstance(event, ToolStarted):
            self._answer.finish()
            self._streamed.clear()
            logged = self._calls.started(event.tool_call)
            call = event.tool_call
            one_line(
                self._console, f"→ [{logged.number}] {call.name} {arguments_text(call)}", "cyan"
            )
        elif isinstance(event, ToolCompleted):
            self._answer.finish()
            self._completed(event.result, event.untrusted)
        elif isinstance(event, PlanCreated):
            self._answer.finish()
            steps = "; ".join(f"{step['id']}: {step['goal']}" for step in event.steps)
            one_line(self._console, f"plan: {steps}", "dim")
        elif isinstance(event, PlanStepStarted):
            self._answer.finish()
            self._streamed.clear()
            one_line(self._console, f"▶ step {event.step_id}: {event.goal}", "dim")
        elif isinstance(event, StrategyFallback):
            self._answer.finish()
            one_line(self._console, f"falling back to {event.to_strategy}: {event.reason}", "dim")
        elif isinstance(event, TaskSucceeded):
            self._answer.finish()
            if not self._streamed.shows(event.output):
                # Not streamed as it is (a typed answer, a plan's synthesis): shown now.
                self._console.print(Markdown(printable(event.output), hyperlinks=False))
        elif isinstance(event, TaskFailed):
            self._answer.finish()
            self._console.print(
                f"✗ the turn failed ({event.error_type}): {printable(event.error)}",
                style="red",
                markup=False,
            )
        elif isinstance(event, TaskCanceled):
            self._answer.finish()
            reason = f": {printable(event.reason)}" if event.reason else ""
            self._console.print(f"■ turn canceled{reason}", style="yellow", markup=False)

    def _delta(self, event: LLMDelta) -> None:
        taken_back = self._streamed.add(event)
        if taken_back:
            self._answer.take_back(taken_back)
        self._answer.add(event.text)

    def _completed(self, result: ToolResult, untrusted: bool) -> None:
        logged = self._calls.completed(result, untrusted=untrusted)
        number = f"[{logged.number}] " if logged is not None else ""
        if result.is_error:
            one_line(self._console, f"✗ {number}{result.error_type}: {result.content}", "red")
            return
        lines = result.content.splitlines()
        first = next((line.strip() for line in lines if line.strip()), "(no output)")
        count = f"{len(lines)} lines: " if len(lines) > 1 else ""
        one_line(self._console, f"← {number}{count}{first}", "green")
