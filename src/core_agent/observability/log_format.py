"""Log records as lines for a person (``text``) or for a program (``json``).

``AGENT_LOG_FORMAT=json`` writes one JSON object a line: ``time`` (UTC, ISO 8601), ``level``,
``logger``, ``message``, ``task_id``, ``trace_id``, ``span_id`` (``null`` outside a task) and,
for a record with an exception, ``exception`` (its traceback). The ids are the ones
``core-agent trace`` shows and an OpenTelemetry collector receives, so a log line leads to its
span. The records must have passed a ``TaskContextFilter`` (``log_context``) for the ids.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from core_agent.observability.log_context import TaskContextFilter

LogFormat = Literal["text", "json"]

SHORT_TASK_ID = 12
"""Characters of a task id in a text line: a prefix that commands accept back."""


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object (non-ASCII text kept as it is)."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "task_id": getattr(record, "task_id", None),
            "trace_id": getattr(record, "trace_id", None),
            "span_id": getattr(record, "span_id", None),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextLogFormatter(logging.Formatter):
    """``LEVEL logger: message``, with ``[task <id prefix>]`` for a record made in a task."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s%(where)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The line, with where the record was made when it was made in a task."""
        task_id = getattr(record, "task_id", None)
        record.where = f" [task {task_id[:SHORT_TASK_ID]}]" if task_id else ""
        return super().formatMessage(record)


def log_to_stderr(
    level: int, log_format: LogFormat = "text", stream: TextIO | None = None
) -> logging.Handler:
    """Send records at ``level`` and above, and Python's warnings, to ``stream`` (stderr).

    The handler stamps each record with the task context and is added to the root logger,
    whose level becomes ``level``; it is returned so a caller can remove it.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(TaskContextFilter())
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else TextLogFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    return handler
