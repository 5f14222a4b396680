"""``core-agent sessions fork|retry|show``: session controls and the transcript, for a person.

Kept apart from ``cli`` so the command parser stays small; imported only when one of these
runs. What a turn is, and how forks and retries treat it, is ``kernel.session_controls``'s.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.safety.terminal_text import printable
from shared.agent_protocol import SessionEntry, SessionTranscript, TaskResult

EXIT_OK = 0


async def fork(args: argparse.Namespace, kernel: AgentKernel) -> int:
    """Fork ``args.session_id`` at ``args.at`` (the latest turn when ``None``).

    Prints the new session's id (its JSON with ``--json``); says on stderr what it holds.
    """
    async with kernel:
        forked = await kernel.fork_session(
            args.session_id, at_turn=args.at, new_session_id=args.new_id
        )
        transcript = await kernel.session_transcript(forked.session_id)
    turns = {entry.turn for entry in transcript.entries}
    if args.json:
        print(forked.model_dump_json(indent=2))
        return EXIT_OK
    origin = forked.forked_from
    assert origin is not None  # a fork records its origin
    print(forked.session_id)
    print(
        f"forked session {origin.session_id} at turn {origin.turn}: "
        f"the new session holds {len(turns)} turns",
        file=sys.stderr,
    )
    return EXIT_OK


async def retry(args: argparse.Namespace, kernel: AgentKernel) -> TaskResult:
    """Run turn ``args.turn`` of ``args.session_id`` again (with ``args.task`` if given)."""
    async with kernel:
        return await kernel.retry_from_turn(args.session_id, args.turn, task=args.task)


def print_transcript(console: Console, transcript: SessionTranscript) -> None:
    """The session's heading, then its history turn by turn, superseded turns marked."""
    session = transcript.session
    state = "closed" if session.closed_at else "open"
    origin = session.forked_from
    forked = f"  forked from {origin.session_id} at turn {origin.turn}" if origin else ""
    console.print(
        f"session {session.session_id}  user: {session.user_id or '-'}  "
        f"tasks: {session.task_count}  {state}{forked}",
        markup=False,
    )
    summarized = {s.through_seq: s for s in transcript.summaries}
    retried = _retried_turns(transcript.entries)
    added = {e.task_id: e.turn for e in transcript.entries if e.superseded_by is None}
    turn = 0
    for entry in transcript.entries:
        if entry.turn != turn:
            turn = entry.turn
            console.print(_turn_heading(entry, retried, added), style="dim", markup=False)
        message = entry.message
        if message.kind == "assistant" and message.tool_calls:
            calls = ", ".join(
                f"{c.name}({json.dumps(c.arguments) if c.arguments is not None else ''})"
                for c in message.tool_calls
            )
            text = f"→ {calls}"
        elif message.kind == "tool":
            text = f"← {message.content[:300]}"
        else:
            text = message.content or ""
        mark = "(superseded) " if entry.superseded_by else ""
        console.print(
            f"[{entry.seq}] {mark}{message.kind}: {printable(text)}",
            style="dim strike" if entry.superseded_by else None,
            markup=False,
        )
        summary = summarized.get(entry.seq)
        if summary is not None:
            used = "superseded" if summary.superseded_by else "used by later tasks"
            console.print(
                f"── summary of 1..{entry.seq} ({used}): {printable(summary.content)}",
                style="dim",
                markup=False,
            )


def _retried_turns(entries: list[SessionEntry]) -> dict[str, int]:
    """For each task that superseded turns, the first turn it superseded."""
    first: dict[str, int] = {}
    for entry in entries:
        if entry.superseded_by is not None:
            first.setdefault(entry.superseded_by, entry.turn)
    return first


def _turn_heading(entry: SessionEntry, retried: dict[str, int], added: dict[str, int]) -> str:
    """``── turn N``, saying which retry superseded it, or which turn it retried."""
    heading = f"── turn {entry.turn}"
    if entry.superseded_by is not None:
        by = added.get(entry.superseded_by)
        heading += (
            f" · superseded by turn {by} (a retry)"
            if by is not None
            else f" · superseded by the retry in task {entry.superseded_by}, which has no"
            " turn yet (if it has ended, this turn can be retried again)"
        )
    elif entry.task_id in retried:
        heading += f" · retry of turn {retried[entry.task_id]}"
    return heading
