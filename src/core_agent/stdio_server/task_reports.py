"""The final ``task/result`` of each task a connection owns, however the task ends.

A task is the connection's from its ``execute_task`` (or the ``resolve_approval`` that
carried it on) until its final result is sent. Most end in a run of the connection, whose
result is the report. The others are made here: from the terminal event of a task that ended
while no run of it was going (canceled while it waited for a human), or from the store, for
a task another process carried to its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.agent_protocol import (
    TaskCanceled,
    TaskEvent,
    TaskFailed,
    TaskResult,
    TaskState,
    TaskStatus,
    TaskSucceeded,
)


@dataclass(eq=False)
class OwnedTask:
    """A task of the connection's, until its final ``task/result`` is sent."""

    session_id: str | None = None
    trace_id: str | None = None
    waiting: bool = False
    """Its last run here stopped to wait for a human (so another process may end it)."""
    final: TaskResult | None = None
    """Its result, made from its terminal event, to send once no run of it is going here."""
    seen_ended: bool = False
    """The store was found to hold it ended once (it is reported on the next look)."""


def result_from_event(event: TaskEvent, owned: OwnedTask) -> TaskResult:
    """The result of a task that ended with ``event`` (a terminal one).

    ``session_id`` and ``trace_id`` are empty when the connection never learnt them (only
    when its run failed before reporting): see ``result_from_state``.
    """
    fields: dict[str, Any] = {
        "task_id": event.task_id,
        "session_id": owned.session_id or "",
        "trace_id": owned.trace_id or "",
    }
    if isinstance(event, TaskSucceeded):
        return TaskResult(
            **fields, status=TaskStatus.SUCCEEDED, output=event.output, usage=event.usage
        )
    if isinstance(event, TaskFailed):
        return TaskResult(
            **fields,
            status=TaskStatus.FAILED,
            error=event.error,
            error_type=event.error_type,
            usage=event.usage,
        )
    if not isinstance(event, TaskCanceled):
        raise TypeError(f"{event.kind} does not end a task")
    return TaskResult(
        **fields, status=TaskStatus.CANCELED, error=event.reason or None, usage=event.usage
    )


def result_from_state(state: TaskState) -> TaskResult:
    """The result of a task as the store has it (its turns and error type are not stored)."""
    return TaskResult(
        task_id=state.task_id,
        session_id=state.session_id,
        trace_id=state.trace_id,
        status=state.status,
        output=state.output,
        error=state.error,
        usage=state.usage,
    )
