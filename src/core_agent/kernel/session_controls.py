"""Session controls: fork a conversation at a turn, retry it from a turn.

A *turn* is what one ended task added to its session's history: the user's message (the
task's text), the tool calls it made with their results, and its answer (or why it has
none). Turns are numbered from 1 in the order they were added (``SessionEntry.turn``) and
keep their number for good, so a number always names the same turn.

* **Fork** (``AgentKernel.fork_session``): a new session holding a copy of the live turns
  1 to N (renumbered from 1) and the summaries of them, with ``forked_from`` naming the
  origin and N. The origin is not changed; later tasks of the fork see only its history.
* **Retry** (``AgentKernel.retry_from_turn``): a new task of the same session runs turn N
  again (its text, or a replacement). Turn N and every live turn after it are marked
  superseded by that task in the transaction that creates it: they stay in the transcript,
  marked, and are never put in a prompt again. The retried turn gets the next number.

Neither is a way around the session's usage limits: the tasks of superseded turns still
count, and a fork carries what its origin had used when turn N was added
(``SessionInfo.inherited_usage``, stored with it, so deleting the origin changes nothing).

A superseded turn can be neither forked at nor retried, with one exception: a retry that
ended without adding a turn (canceled by its caller, or killed by a bug) leaves the turns it
superseded with nothing in their place, and those can be retried again; the new retry takes
them over (``superseded_by`` names it). A retry that *fails* adds its turn, like any failed
task: the turn says why it has no answer, the turns it superseded stay superseded, and the
user retries the failed turn (a later task's prompt holds that failure, as it would any). A
session whose task has not ended can be neither forked nor retried (the turn it will add
would be lost or out of order).
"""

from __future__ import annotations

from collections.abc import Sequence

from core_agent.contracts.errors import UsageError
from shared.agent_protocol import SessionEntry, TaskRequest, TaskState, UserMessage

RETRY_OF_TURN = "retry_of_turn"
"""Key of a retrying task's request metadata: the number of the turn it runs again."""


def turn_entries(
    session_id: str,
    entries: Sequence[SessionEntry],
    turn: int | None,
    doing: str,
    *,
    abandoned: bool = False,
) -> list[SessionEntry]:
    """The entries of the live ``turn`` (the latest live turn when ``None``).

    With ``abandoned`` a turn superseded by a retry that added no turn is taken too (see
    ``abandoned_by``).

    Raises:
        UsageError: There is no such turn, or it was superseded; the message says which
            turns can be used.
    """
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int)):
        # True == 1 in Python: a flag passed by mistake would take turn 1 (and a retry
        # supersede every turn after it).
        raise UsageError(f"a turn is a whole number, not {turn!r}")
    live = sorted({e.turn for e in entries if e.superseded_by is None})
    if not live:
        held = "only superseded turns" if entries else "no turns yet"
        raise UsageError(f"session {session_id!r} has {held}: nothing to {doing}")
    number = live[-1] if turn is None else turn
    found = [e for e in entries if e.turn == number]
    if not found:
        last = max(e.turn for e in entries)
        raise UsageError(f"session {session_id!r} has turns 1 to {last}, not {number}")
    if found[0].superseded_by is not None and not (abandoned and abandoned_by(found[0], entries)):
        raise UsageError(
            f"turn {number} of session {session_id!r} was superseded by the retry in task "
            f"{found[0].superseded_by}; its live turns are {number_ranges(live)}"
        )
    return found


def abandoned_by(entry: SessionEntry, entries: Sequence[SessionEntry]) -> bool:
    """Whether ``entry`` was superseded by a retry that has no turn in ``entries``.

    Once the session has no task that has not ended, that retry ended without adding one.
    """
    by = entry.superseded_by
    return by is not None and not any(e.task_id == by for e in entries)


def retry_request(
    session_id: str,
    turn: int,
    entries: Sequence[SessionEntry],
    original: TaskState | None,
    task: str | None,
) -> TaskRequest:
    """The request that runs ``turn`` (its ``entries``) again in ``session_id``.

    The original task's request (tools, mode, limits, workspace) when it is still stored,
    with ``task`` in place of its text when given; else a request of the turn's text alone
    (a forked session's turns were written by another session's tasks, which may be gone).

    Raises:
        UsageError: ``task`` is blank.
    """
    if task is not None and not task.strip():
        raise UsageError("the retried turn's task text is empty")
    if original is not None:
        base = original.request
        text = task if task is not None else base.task
    else:
        said = entries[0].message
        text = task if task is not None else said.content if isinstance(said, UserMessage) else ""
        if not text:
            raise UsageError(f"turn {turn} holds no task text to run again: give one")
        base = TaskRequest(task=text)
    metadata = {**base.metadata, RETRY_OF_TURN: turn}
    return base.model_copy(update={"task": text, "session_id": session_id, "metadata": metadata})


def number_ranges(numbers: Sequence[int]) -> str:
    """Sorted ``numbers`` as ranges: ``1-3, 5``."""
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(parts)
