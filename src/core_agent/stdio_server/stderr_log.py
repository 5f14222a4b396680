"""The server's logging, written to stderr by a thread of its own through a bounded queue.

A host that never reads the server's stderr (many do not) fills the pipe, and from then on
every write to it blocks. Logging there from the event loop would freeze the server: no
request answered, no event sent. So records are put on a queue without waiting, a daemon
thread writes them to stderr (waiting on the pipe as long as it takes), and when the queue
is full a record is dropped and counted; the count is written as soon as stderr takes lines
again. Python's warnings are logged the same way.

``logging.handlers.QueueListener`` is not used for the thread: its ``stop`` waits without a
limit for a thread that may be stuck on the pipe for good.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import queue
import sys
import threading
from collections.abc import Iterator

from core_agent.observability.log_context import TaskContextFilter

DEFAULT_MAX_RECORDS = 1000
"""Records held for stderr (a few hundred kilobytes at most); more are dropped, counted."""


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Puts records on a bounded queue, never waiting: when it is full a record is dropped."""

    def __init__(self, records: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(records)
        self.dropped = 0
        self._count_lock = threading.Lock()

    def enqueue(self, record: logging.LogRecord) -> None:
        """Queue ``record`` (already formatted by ``prepare``), or count it as dropped."""
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            with self._count_lock:
                self.dropped += 1

    def take_dropped(self) -> int:
        """The records dropped since the last call."""
        with self._count_lock:
            dropped, self.dropped = self.dropped, 0
        return dropped


class _StderrWriter:
    """The thread that hands the queued records to the handlers that write stderr."""

    def __init__(
        self,
        records: queue.Queue[logging.LogRecord | None],
        handlers: list[logging.Handler],
        source: _DroppingQueueHandler,
    ) -> None:
        self._records = records
        self._handlers = handlers
        self._source = source
        self._thread = threading.Thread(target=self._run, name="core-agent stderr log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Write what is queued for up to ``timeout_s``; a thread still stuck is left."""
        with contextlib.suppress(queue.Full):
            self._records.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (record := self._records.get()) is not None:
            self._write(record)
            self._report_dropped()
        self._report_dropped()

    def _report_dropped(self) -> None:
        if dropped := self._source.take_dropped():
            report = {
                "name": __name__,
                "levelno": logging.WARNING,
                "levelname": "WARNING",
                "msg": f"{dropped} log record(s) dropped: stderr was not read fast enough "
                "(the server never waits for it)",
            }
            self._write(logging.makeLogRecord(report))

    def _write(self, record: logging.LogRecord) -> None:
        for handler in self._handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def _stderr_handler() -> logging.Handler:
    # What Python's last resort handler does when nothing is configured: warnings and
    # worse, the message alone, to stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    return handler


@contextlib.contextmanager
def logging_off_the_event_loop(max_records: int = DEFAULT_MAX_RECORDS) -> Iterator[None]:
    """Route the root logger (and Python's warnings) through a bounded queue, for the block.

    The root logger's handlers (or a stderr handler like Python's last resort, when it has
    none) are moved to the writing thread; they are put back at the end, after what is
    queued has had a second to be written.
    """
    root = logging.getLogger()
    original = root.handlers[:]
    handlers = original or [_stderr_handler()]
    records: queue.Queue[logging.LogRecord | None] = queue.Queue(max_records)
    source = _DroppingQueueHandler(records)
    # Stamped here, in the thread that made the record: the writing thread has no task.
    source.addFilter(TaskContextFilter())
    writer = _StderrWriter(records, handlers, source)
    writer.start()
    root.handlers = [source]
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.handlers = original
        writer.stop(timeout_s=1.0)
