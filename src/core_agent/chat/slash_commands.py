"""The ``/`` commands of the chat: what each does, and the table ``/help`` prints.

A command acts on the chat (``ChatRepl``): its kernel, its session, its tool calls. An
unknown name is one line with the closest known one.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core_agent.chat.line_editor import CONTINUATION

if TYPE_CHECKING:
    from core_agent.chat.repl import ChatRepl
    from shared.agent_protocol import SessionEntry


class Quit(Exception):
    """Raised by ``/exit``: the chat ends."""


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """A command: its name, its argument (if any), what it does, and how."""

    name: str
    argument: str
    summary: str
    run: Callable[[ChatRepl, str], Awaitable[None]]


KEYS = (
    ("Enter", "send"),
    ("Esc Enter, or \\ at the end of a line", "a new line (pasted text keeps its lines)"),
    ("↑ ↓", "earlier messages (kept in the data directory)"),
    ("Ctrl-C", "cancel the running turn (at the prompt: clear the line)"),
    ("Ctrl-D", "quit (on an empty line)"),
)


def _turns(count: int) -> str:
    return f"{count} turn" if count == 1 else f"{count} turns"


async def _help(chat: ChatRepl, argument: str) -> None:
    console = chat.console
    console.print("commands:", style="bold")
    for command in COMMANDS.values():
        usage = f"/{command.name}" + (f" {command.argument}" if command.argument else "")
        console.print(f"  {usage:<16} {command.summary}", markup=False, highlight=False)
    console.print("keys:", style="bold")
    for keys, meaning in KEYS:
        console.print(f"  {keys:<38} {meaning}", markup=False, highlight=False)
    console.print(
        f"A line of more than one starts with {CONTINUATION.strip()!r}. The workspace's "
        "AGENTS.md, if any, is read at the start and by /new: it adds to the instructions, "
        "never to the settings.",
        style="dim",
        markup=False,
    )


async def _new(chat: ChatRepl, argument: str) -> None:
    await chat.new_session()
    chat.console.print("new session: it starts with your next message", style="dim")


async def _sessions(chat: ChatRepl, argument: str) -> None:
    from core_agent.safety.terminal_text import printable

    kernel = (await chat.ready()).kernel
    sessions = await kernel.list_sessions(limit=15)
    if not sessions:
        chat.console.print("no sessions yet", style="dim")
        return
    for session in sessions:
        mark = "*" if session.session_id == chat.session_id else " "
        title = printable(str(session.metadata.get("title", "")), newlines=False)
        state = " (closed)" if session.closed_at else ""
        chat.console.print(
            f"{mark} {session.session_id[:12]}  {_turns(session.task_count):>9}  "
            f"{session.updated_at:%Y-%m-%d %H:%M}{state}  {title[:60]}",
            markup=False,
            highlight=False,
        )
    chat.console.print("/resume ID continues one (a prefix of its id is enough)", style="dim")


async def _resume(chat: ChatRepl, argument: str) -> None:
    from core_agent.contracts.errors import UsageError

    if not argument:
        raise UsageError("/resume takes a session id (or the start of one): see /sessions")
    await chat.resume_session(argument)


async def _compact(chat: ChatRepl, argument: str) -> None:
    from core_agent.chat.rendering import money
    from core_agent.safety.terminal_text import printable

    if chat.session_id is None:
        chat.console.print("nothing to compact: the session has no turns yet", style="dim")
        return
    kernel = (await chat.ready()).kernel
    with chat.interruptible():
        summary = await kernel.compact_session(chat.session_id)
    if summary is None:
        chat.console.print("nothing new to compact", style="dim")
        return
    usage = summary.usage
    chat.console.print(
        f"compacted: the next turns start from this summary ({usage.input_tokens:,} in · "
        f"{usage.output_tokens:,} out · {money(usage.cost_usd)})",
        style="green",
    )
    chat.console.print(printable(summary.content), style="dim", markup=False, highlight=False)


async def _model(chat: ChatRepl, argument: str) -> None:
    if not argument:
        current = await chat.ready()
        chat.console.print(f"model: {current.model}  (/model NAME switches)", markup=False)
        return
    switched = await chat.switch_model(argument)
    chat.console.print(f"model: {switched.model} from the next turn on", markup=False)


async def _tools(chat: ChatRepl, argument: str) -> None:
    from core_agent.chat.rendering import one_line

    current = await chat.ready()
    for spec in current.tools:
        first = spec.description.strip().splitlines()[0] if spec.description.strip() else ""
        one_line(chat.console, f"  {spec.name:<18} {first}")


async def _cost(chat: ChatRepl, argument: str) -> None:
    from core_agent.chat.rendering import money

    usage, turns = await chat.session_usage()
    chat.console.print(
        f"this session: {_turns(turns)} · {usage.input_tokens:,} in · {usage.output_tokens:,} out "
        f"· {money(usage.cost_usd)}",
        markup=False,
    )
    total = chat.chat_usage
    chat.console.print(
        f"this chat: {total.input_tokens:,} in · {total.output_tokens:,} out · "
        f"{money(total.cost_usd)}",
        markup=False,
    )


async def _show(chat: ChatRepl, argument: str) -> None:
    from core_agent.chat.rendering import show_call
    from core_agent.contracts.errors import UsageError

    try:
        number = int(argument.strip().lstrip("[#").rstrip("]"))
    except ValueError:
        raise UsageError(f"/show takes the number of a tool call, not {argument!r}") from None
    logged = chat.calls.get(number)
    if logged is None:
        raise UsageError(
            f"no tool call {number}: this chat has made {len(chat.calls)}"
            if len(chat.calls)
            else "no tool call yet"
        )
    show_call(chat.console, logged)


async def _last(chat: ChatRepl, argument: str) -> None:
    from core_agent.chat.rendering import show_call

    logged = chat.calls.last()
    if logged is None:
        chat.console.print("no tool call yet", style="dim")
        return
    show_call(chat.console, logged)


async def _exit(chat: ChatRepl, argument: str) -> None:
    raise Quit


COMMANDS: dict[str, SlashCommand] = {
    command.name: command
    for command in (
        SlashCommand("help", "", "this list", _help),
        SlashCommand("new", "", "start a new session", _new),
        SlashCommand("sessions", "", "recent sessions", _sessions),
        SlashCommand("resume", "ID", "continue a session (a prefix of its id is enough)", _resume),
        SlashCommand(
            "compact", "", "summarize the session so far; later turns start from it", _compact
        ),
        SlashCommand(
            "model", "[NAME]", "show the model, or switch to NAME (a litellm model)", _model
        ),
        SlashCommand("tools", "", "the tools the assistant can call", _tools),
        SlashCommand("show", "N", "tool call N whole: its arguments and result", _show),
        SlashCommand("last", "", "the last tool call whole", _last),
        SlashCommand("cost", "", "tokens and cost of this session and this chat", _cost),
        SlashCommand("exit", "", "quit (Ctrl-D too)", _exit),
    )
}


_COMMAND = re.compile(r"\s*/[A-Za-z]*(\s|$)")


def is_command(line: str) -> bool:
    """Whether ``line`` is a command: ``/`` and a word (``/etc/hosts?`` is a message)."""
    return _COMMAND.match(line) is not None


def parse(line: str) -> tuple[SlashCommand, str]:
    """The command a ``/`` line names, and the rest of the line (its argument).

    Raises:
        UsageError: No such command (with the closest name).
    """
    from core_agent.contracts.errors import UsageError

    name, _, argument = line.strip()[1:].partition(" ")
    command = COMMANDS.get(name.lower())
    if command is None:
        close = difflib.get_close_matches(name.lower(), list(COMMANDS), n=1, cutoff=0.5)
        hint = f" (did you mean /{close[0]}?)" if close else ""
        raise UsageError(f"unknown command /{name}{hint}; /help lists them")
    return command, argument.strip()


def transcript_lines(entries: Sequence[SessionEntry], *, last: int) -> list[str]:
    """The last ``last`` messages of a session, one short line each (for ``/resume``)."""
    from core_agent.safety.terminal_text import printable

    lines = []
    for entry in entries[-last:]:
        message = entry.message
        if message.kind == "assistant" and message.tool_calls:
            text = "→ " + ", ".join(
                f"{c.name} {json.dumps(c.arguments, ensure_ascii=False)}"
                for c in message.tool_calls
            )
        elif message.kind == "tool":
            text = f"← {message.content}"
        else:
            who = "you" if message.kind == "user" else message.kind
            text = f"{who}: {message.content or ''}"
        shown = printable(text, newlines=False)
        lines.append(shown if len(shown) <= 200 else shown[:199] + "…")
    return lines
