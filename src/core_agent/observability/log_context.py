"""The task, trace and span a log record was made in, carried by context variables.

The kernel sets them while a task runs (``task_log_context``) and while each of its spans is
open (``span_log_context``, set by the tracer). Context variables follow the code into the
tasks it starts (parallel tool calls, plan steps) and stay apart between concurrent tasks, so
a record made anywhere below a task's run carries that task's ids. ``TaskContextFilter``
copies them onto records; the command line's handlers have it, and a host can add it to its
own (``handler.addFilter(TaskContextFilter())``, then ``%(task_id)s`` in a format).
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from typing import NamedTuple


class LogContext(NamedTuple):
    """Where a record was made: ``None`` for what is not known there."""

    task_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None


OUTSIDE_TASKS = LogContext()
_current: ContextVar[LogContext] = ContextVar("core_agent_log_context", default=OUTSIDE_TASKS)


def current_log_context() -> LogContext:
    """The ids of the task and span running here."""
    return _current.get()


class _Within:
    """Sets the context for a ``with`` block (a class: a span's cost is kept to a microsecond)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: LogContext) -> None:
        self._context = context
        self._token: Token[LogContext] | None = None

    def __enter__(self) -> None:
        self._token = _current.set(self._context)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _reset(self._token)


def task_log_context(task_id: str, trace_id: str) -> AbstractContextManager[None]:
    """Records made in the block carry ``task_id`` and ``trace_id`` (and no span of another)."""
    return _Within(LogContext(task_id=task_id, trace_id=trace_id))


def span_log_context(task_id: str, trace_id: str, span_id: str) -> AbstractContextManager[None]:
    """Records made in the block carry the span's ids."""
    return _Within(LogContext(task_id=task_id, trace_id=trace_id, span_id=span_id))


def _reset(token: Token[LogContext]) -> None:
    # Left in another context than the one it was entered in (a generator finalised
    # elsewhere), the variable is not restored: that context ends with the block anyway.
    with contextlib.suppress(ValueError):
        _current.reset(token)


class TaskContextFilter(logging.Filter):
    """Adds ``task_id``, ``trace_id`` and ``span_id`` to each record (``None`` outside a task).

    A record that already has them keeps them: one stamped where it was made, before a queue
    handed it to another thread, is not restamped there.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Stamp ``record``; never drops one."""
        if not hasattr(record, "task_id"):
            context = _current.get()
            record.task_id = context.task_id
            record.trace_id = context.trace_id
            record.span_id = context.span_id
        return True
