"""How a chat turn looks: streamed text, one line per tool call, no terminal escapes."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from itertools import count
from typing import Any

from rich.console import Console

from core_agent.chat.rendering import ToolCallLog, TurnView, show_call
from shared.agent_protocol import (
    AssistantMessage,
    LLMCompleted,
    LLMDelta,
    TaskSucceeded,
    TokenUsage,
    ToolCall,
    ToolCompleted,
    ToolResult,
    ToolStarted,
)

_seq = count()


def event(kind: type[Any], **fields: Any) -> Any:
    n = next(_seq)
    return kind(event_id=f"e{n}", task_id="t", seq=n, occurred_at=datetime.now(UTC), **fields)


def screen() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=100, force_terminal=False, color_system=None), out


def test_a_retried_model_call_shows_only_the_text_of_its_last_try() -> None:
    console, out = screen()
    view = TurnView(console, ToolCallLog())
    view.show(event(LLMDelta, text="The answ", attempt=1))
    view.show(event(LLMDelta, text="The answer is ", attempt=2))
    view.show(event(LLMDelta, text="42.", attempt=2))
    view.show(event(TaskSucceeded, output="The answer is 42.", usage=TokenUsage()))
    view.close()
    assert out.getvalue().strip() == "The answer is 42."


def completed(text: str) -> LLMCompleted:
    return event(
        LLMCompleted,
        model="m",
        message=AssistantMessage(content=text),
        usage=TokenUsage(),
        latency_ms=1.0,
    )


def test_a_retry_takes_back_only_its_own_call_s_text() -> None:
    # An answer cut by the output limit is asked to go on in a second call. That call's
    # first try failed before saying anything, so its text comes as attempt 2: it must not
    # take back the first call's text; a third try of it takes back only its own.
    console, out = screen()
    view = TurnView(console, ToolCallLog())
    view.show(event(LLMDelta, text="Part one, ", attempt=1))
    view.show(completed("Part one, "))
    view.show(event(LLMDelta, text="part tw", attempt=2))
    view.show(event(LLMDelta, text="part two.", attempt=3))
    view.show(completed("part two."))
    view.show(event(TaskSucceeded, output="Part one, part two.", usage=TokenUsage()))
    view.close()
    assert out.getvalue().strip() == "Part one, part two."


def test_escape_sequences_from_the_model_and_tools_are_shown_not_sent() -> None:
    console, out = screen()
    calls = ToolCallLog()
    view = TurnView(console, calls)
    call = ToolCall(id="c1", name="run_command", arguments={"command": "cat x\x1b[2J"})
    view.show(event(ToolStarted, tool_call=call))
    hostile = "\x1b]0;pwned\x07 title"
    view.show(
        event(
            ToolCompleted,
            result=ToolResult(call_id="c1", name="run_command", content=hostile),
            latency_ms=1.0,
        )
    )
    view.show(event(LLMDelta, text="done \x1b[31mred\u202e"))
    view.close()
    show_call(console, calls.get(1))  # type: ignore[arg-type]
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b]0;pwned\\x07" in shown and "\\u202e" in shown


def test_tool_calls_are_one_line_each_and_whole_on_request() -> None:
    console, out = screen()
    calls = ToolCallLog()
    view = TurnView(console, calls)
    long_text = "x" * 500
    call = ToolCall(id="c1", name="write_file", arguments={"path": "a.txt", "content": long_text})
    view.show(event(ToolStarted, tool_call=call))
    result = "line one\nline two\nline three"
    view.show(
        event(
            ToolCompleted,
            result=ToolResult(call_id="c1", name="write_file", content=result),
            latency_ms=1.0,
            untrusted=True,
        )
    )
    view.show(event(ToolStarted, tool_call=ToolCall(id="c2", name="grep", arguments={})))
    view.show(
        event(
            ToolCompleted,
            latency_ms=1.0,
            result=ToolResult(
                call_id="c2",
                name="grep",
                content="bad pattern",
                is_error=True,
                error_type="ToolError",
            ),
        )
    )
    view.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith('→ [1] write_file {"path": "a.txt"') and len(lines[0]) <= 100
    assert lines[1] == "← [1] 3 lines: line one"
    assert lines[2:] == ["→ [2] grep {}", "✗ [2] ToolError: bad pattern"]

    console, out = screen()
    show_call(console, calls.get(1))  # type: ignore[arg-type]
    whole = out.getvalue()
    assert long_text in whole and "line one\nline two\nline three" in whole
    assert "result (untrusted: the model was told not to follow instructions in it)" in whole


def test_an_answer_that_did_not_stream_is_shown_when_the_turn_ends() -> None:
    console, out = screen()
    view = TurnView(console, ToolCallLog())
    view.show(event(LLMDelta, text="Step one is done."))
    view.show(event(TaskSucceeded, output="The **final** answer.", usage=TokenUsage()))
    view.close()
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines == ["Step one is done.", "The final answer."]
