"""A task as JSON lines, to attach to a bug report and replay on another machine.

One JSON object a line, each with its ``type`` and the format's ``version``:

* ``{"type": "export", "version": 1, "format": "core-agent-task", "task_id": ..., "events": N,
  "spans": M, "exported_at": ..., "core_agent": "0.1.0"}`` first: what follows, and how much;
* ``{"type": "task", "version": 1, "task": {...}}``: the stored task;
* ``{"type": "event", "version": 1, "event": {...}}``: each event of its log, in order;
* ``{"type": "span", "version": 1, "span": {...}}``: each span of its trace.

Everything in it was redacted when stored (keys and secrets never reach the stores). Reading
one back checks it whole before anything is stored: a file cut short, edited by hand into
something else, or written by a newer format is refused with one line saying where. So is
one no run could have written, which the stores or what reads them would choke on: values
nested deeper than ``MAX_NESTING``, numbers that are not finite or do not fit a 64-bit
integer, spans of another trace than the task's, negative tokens or costs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from core_agent.command_errors import validation_line
from core_agent.contracts.errors import UsageError
from core_agent.contracts.trace_store import Span
from shared.agent_protocol import (
    EPHEMERAL_EVENT_KINDS,
    AgentEvent,
    TaskEvent,
    TaskQueued,
    TaskState,
)

EXPORT_FORMAT = "core-agent-task"
EXPORT_VERSION = 1
IMPORTED = "imported"
"""Request metadata key ``import`` sets on every task it stores (``True``): what such a task
recorded (tool calls, their arguments, the workspace) came from a file, and is not run for
real as it stands: ``replay --rerun --tools live`` refuses it, a fork of it is tainted."""
"""The version this code writes and the newest it reads."""
MAX_NESTING = 128
"""How deep a line's JSON may nest (a span's attributes, a tool call's arguments): a task's
records are shallow, and a value about twice as deep fails to be stored (the JSON encoder
stops at 255 levels) or read back (recursion)."""
_INT_RANGE = range(-(2**63), 2**63)
"""What SQLite (and most readers) store as an integer."""

_EVENT: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)
_SPAN: TypeAdapter[Span] = TypeAdapter(Span)


@dataclass(frozen=True, slots=True)
class TaskExport:
    """A task with its event log and spans, as an export holds them."""

    task: TaskState
    events: Sequence[TaskEvent]
    spans: Sequence[Span]


def export_lines(export: TaskExport, *, version: str = "") -> Iterator[str]:
    """The export as JSON lines (without line ends), the header first."""
    task = export.task
    header = {
        "type": "export",
        "version": EXPORT_VERSION,
        "format": EXPORT_FORMAT,
        "task_id": task.task_id,
        "events": len(export.events),
        "spans": len(export.spans),
        "exported_at": datetime.now(UTC).isoformat(),
        "core_agent": version,
    }
    yield json.dumps(header, ensure_ascii=False)
    yield _line("task", task=task.model_dump(mode="json"))
    for event in export.events:
        yield _line("event", event=event.model_dump(mode="json"))
    for span in export.spans:
        yield _line("span", span=_SPAN.dump_python(span, mode="json"))


def _line(kind: str, **payload: Any) -> str:
    return json.dumps({"type": kind, "version": EXPORT_VERSION, **payload}, ensure_ascii=False)


class ExportReader:
    """Reads an export, line by line, into a ``TaskExport``; every problem is a ``UsageError``.

    ``source`` names the file in messages (``FILE line 3: ...``).
    """

    def __init__(self, source: str) -> None:
        self._source = source

    def _fail(self, message: str, line: int | None = None) -> UsageError:
        where = f"{self._source} line {line}" if line is not None else self._source
        return UsageError(f"{where}: {message}")

    def read(self, lines: Iterable[str]) -> TaskExport:
        """The task, events and spans the lines hold, checked whole.

        Raises:
            UsageError: The lines are not a complete export this version reads.
        """
        header: dict[str, Any] | None = None
        task: TaskState | None = None
        events: list[TaskEvent] = []
        spans: list[Span] = []
        number = 0
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            record = self._record(text, number)
            kind = record.get("type")
            if header is None:
                header = self._header(record, number)
                continue
            if kind == "task":
                if task is not None:
                    raise self._fail("a second task (an export holds one)", number)
                task = self._model(TaskState, record.get("task"), number)
            elif kind == "event":
                events.append(self._event(record.get("event"), number))
            elif kind == "span":
                spans.append(self._model(_SPAN, record.get("span"), number))
            else:
                raise self._fail(f"unknown record type {kind!r}", number)
        if header is None:
            raise self._fail("empty: not a core-agent task export")
        if task is None:
            raise self._fail("no task record: the file is cut short")
        self._check(header, task, events, spans)
        return TaskExport(task, events, spans)

    def _record(self, text: str, number: int) -> dict[str, Any]:
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self._fail(f"not JSON ({exc.msg}, column {exc.colno})", number) from None
        except RecursionError:
            raise self._fail(f"nested more than {MAX_NESTING} levels deep", number) from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise self._fail(f"not JSON this reads ({exc})", number) from None
        if not isinstance(record, dict):
            raise self._fail("not a JSON object", number)
        problem = _unstorable(record)
        if problem is not None:
            raise self._fail(problem, number)
        version = record.get("version")
        if not isinstance(version, int):
            raise self._fail("no format version", number)
        if version > EXPORT_VERSION:
            raise self._fail(
                f"format version {version} is newer than this core-agent reads "
                f"({EXPORT_VERSION}): upgrade core-agent",
                number,
            )
        return record

    def _header(self, record: dict[str, Any], number: int) -> dict[str, Any]:
        if record.get("type") != "export" or record.get("format") != EXPORT_FORMAT:
            raise self._fail(
                f"not a core-agent task export (the first line must be its {EXPORT_FORMAT!r} "
                "header)",
                number,
            )
        for name in ("events", "spans"):
            if not isinstance(record.get(name), int):
                raise self._fail(f"the header has no count of {name}", number)
        return record

    def _model(self, adapter: Any, value: object, number: int) -> Any:
        try:
            if isinstance(adapter, TypeAdapter):
                return adapter.validate_python(value)
            return adapter.model_validate(value)
        except ValidationError as exc:
            raise self._fail(validation_line(exc), number) from None

    def _event(self, value: object, number: int) -> TaskEvent:
        event: TaskEvent = self._model(_EVENT, value, number)
        if event.kind in EPHEMERAL_EVENT_KINDS:
            raise self._fail(f"a {event.kind} event is never stored", number)
        return event

    def _check(
        self,
        header: dict[str, Any],
        task: TaskState,
        events: list[TaskEvent],
        spans: list[Span],
    ) -> None:
        if len(events) != header["events"] or len(spans) != header["spans"]:
            raise self._fail(
                f"holds {len(events)} events and {len(spans)} spans where its header says "
                f"{header['events']} and {header['spans']}: the file is cut short or was edited"
            )
        if header.get("task_id") != task.task_id:
            raise self._fail(f"the header names task {header.get('task_id')!r}, not the task's")
        if not events or not isinstance(events[0], TaskQueued):
            raise self._fail("the task's event log must begin with its task.queued event")
        strangers = {e.task_id for e in events} | {s.task_id for s in spans}
        strangers.discard(task.task_id)
        if strangers:
            raise self._fail(f"records of other tasks ({', '.join(sorted(strangers))})")
        for span in spans:
            # A task's spans are its own trace's: another trace's would be shown in that
            # trace's tree (another task's, perhaps), and count in its metrics.
            if span.trace_id != task.trace_id:
                raise self._fail(
                    f"a span of another trace ({span.span_id} is in trace {span.trace_id}, "
                    f"the task's is {task.trace_id})"
                )
            counts = (span.tokens_in, span.tokens_out, span.cost_usd)
            if any(count is not None and count < 0 for count in counts):
                raise self._fail(f"a span with negative cost or tokens ({span.span_id})")
            if span.ended_at < span.started_at:
                raise self._fail(f"a span that ends before it starts ({span.span_id})")
        seqs = [event.seq for event in events]
        if seqs != sorted(set(seqs)):
            raise self._fail("the events are not in order (their seq numbers must rise)")
        if len({e.event_id for e in events}) != len(events):
            raise self._fail("two events have the same id")
        if len({s.span_id for s in spans}) != len(spans):
            raise self._fail("two spans have the same id")
        if not task.status.is_terminal:
            raise self._fail(
                f"task {task.task_id} is {task.status.value}: only a task that has ended can "
                "be imported (its run cannot be carried on from an export)"
            )


def _unstorable(value: object) -> str | None:
    """Why ``value`` (a parsed line) cannot be stored and read back, if it cannot."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_NESTING:
                return f"nested more than {MAX_NESTING} levels deep"
            members = item.values() if isinstance(item, dict) else item
            stack.extend((member, depth + 1) for member in members)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if item not in _INT_RANGE:
                return f"a number too large ({item.bit_length()} bits): no run records one"
        elif isinstance(item, float) and not math.isfinite(item):
            return f"a number that is not finite ({item}): no run records one"
    return None
