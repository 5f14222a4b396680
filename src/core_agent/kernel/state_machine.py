"""The task lifecycle: which status may follow which."""

from __future__ import annotations

from types import MappingProxyType

from core_agent.contracts.errors import InvalidTransitionError
from shared.agent_protocol import TaskStatus

_S = TaskStatus

ALLOWED_TRANSITIONS: MappingProxyType[TaskStatus, frozenset[TaskStatus]] = MappingProxyType(
    {
        _S.QUEUED: frozenset({_S.RUNNING, _S.FAILED, _S.CANCELED}),
        _S.RUNNING: frozenset({_S.WAITING_APPROVAL, _S.SUCCEEDED, _S.FAILED, _S.CANCELED}),
        _S.WAITING_APPROVAL: frozenset({_S.RUNNING, _S.FAILED, _S.CANCELED}),
        _S.SUCCEEDED: frozenset(),
        _S.FAILED: frozenset(),
        _S.CANCELED: frozenset(),
    }
)
"""``queued -> running -> (waiting_approval <-> running) -> succeeded | failed | canceled``.

A queued task may be canceled before it starts, or fail when its process died before it
could (recovery set to fail); a waiting task may be canceled or fail (a denied or expired
approval). Terminal statuses have no way out.
"""


def check_transition(task_id: str, current: TaskStatus, requested: TaskStatus) -> None:
    """Raise ``InvalidTransitionError`` unless ``current -> requested`` is allowed."""
    if requested not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransitionError(task_id, current.value, requested.value)
