"""How a failed command is told to a person: one line, and the status the command exits with.

``0`` done, ``1`` the run failed (a model, tool or storage failure), ``2`` misuse or
configuration (bad arguments, settings or input; fixable by the person), ``3`` the task is
waiting for a human. A traceback is printed only with ``--debug``.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

# Nothing heavy at import: the command line imports this module to start.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING = 0, 1, 2, 3

TASK_REQUEST_SOURCES = {
    "task": "the task",
    "max_turns": "--max-turns",
    "session_id": "--session",
    "force_mode": "--mode",
}
"""Where each field of a task request comes from on the command line."""

_QUOTED = re.compile(r"'([^']*)'")


def explain(exc: BaseException) -> tuple[str, int]:
    """The one line to print for ``exc`` (without the ``core-agent:`` prefix) and the exit status.

    Errors the kernel names (its ``UsageError`` tree) and invalid settings or input are the
    person's to fix (2); run failures are 1; anything else is a bug, reported as such (1).
    """
    from pydantic import ValidationError

    from core_agent.contracts.errors import CoreAgentError, UsageError

    if isinstance(exc, ValidationError):
        return validation_line(exc), EXIT_USAGE
    if isinstance(exc, UsageError):
        return one_line(str(exc)), EXIT_USAGE
    if isinstance(exc, CoreAgentError):
        return one_line(f"{type(exc).__name__}: {exc}"), EXIT_FAILED
    if isinstance(exc, OSError) and exc.filename is not None:
        what = exc.strerror or type(exc).__name__
        return f"{what}: {exc.filename} (check AGENT_DATA_DIR and the paths given)", EXIT_USAGE
    # Notes (``add_note``) say where it happened, e.g. which entry point failed to build.
    notes = " ".join(one_line(note) for note in getattr(exc, "__notes__", ()))
    return (
        f"internal error: {type(exc).__name__}: {exc}{f' ({notes})' if notes else ''} (run "
        "again with --debug for the traceback, and report it)",
        EXIT_FAILED,
    )


def one_line(message: str) -> str:
    """A message written over several lines (a list of typos, a help text) as one line."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def validation_line(exc: ValidationError) -> str:
    """Each invalid value with where it came from, what is wrong and the closest valid one."""
    return "; ".join(_problem(exc.title, error) for error in exc.errors(include_url=False))


def _problem(model: str, error: Any) -> str:
    from core_agent.contracts.settings import PREFIX

    field = ".".join(str(part) for part in error.get("loc", ()))
    if model == "AgentSettings":
        where = f"{PREFIX}{field.split('.')[0].upper()}" if field else "the settings"
    else:
        where = TASK_REQUEST_SOURCES.get(field, field or model)
    value = error.get("input")
    notes = [f"got {value!r}"] if isinstance(value, str | int | float) else []
    expected = (error.get("ctx") or {}).get("expected")
    if isinstance(value, str) and isinstance(expected, str):
        close = difflib.get_close_matches(value, _QUOTED.findall(expected), n=1)
        if close:
            notes.append(f"did you mean {close[0]!r}?")
    message = f"{error['msg'][0].lower()}{error['msg'][1:]}"
    return f"{where}: {message}" + (f" ({'; '.join(notes)})" if notes else "")
