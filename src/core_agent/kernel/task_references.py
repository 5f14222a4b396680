"""Which task a person means by what they typed: an id, a prefix of one, a trace id, ``last``."""

from __future__ import annotations

from core_agent.contracts.errors import TaskNotFoundError, UsageError
from core_agent.contracts.task_store import ITaskStore


async def find_task_id(store: ITaskStore, reference: str) -> str:
    """The id of the task ``reference`` names in ``store``.

    ``reference`` is a whole id, a unique prefix of one, the task's trace id, or ``last``
    (the newest task).

    Raises:
        TaskNotFoundError: Nothing matches.
        UsageError: A prefix several tasks share (the error lists some of them).
    """
    if reference == "last":
        newest = await store.list_tasks(limit=1)
        if not newest:
            raise TaskNotFoundError("last")
        return newest[0].task_id
    matches = await store.match_task_ids(reference, limit=5)
    if not matches:
        raise TaskNotFoundError(reference)
    if len(matches) > 1 and reference not in matches:
        shown = ", ".join(matches[:4]) + (", ..." if len(matches) > 4 else "")
        raise UsageError(f"{reference!r} is the start of several task ids: {shown}")
    return reference if reference in matches else matches[0]
