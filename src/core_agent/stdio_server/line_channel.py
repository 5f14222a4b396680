"""Lines in and out of the stdio protocol: bounded reading, serialised writing.

Each side has a daemon thread of its own for its blocking ``os.read`` or ``os.write``: the
event loop never blocks on a pipe, a host that stops reading our output does not stop us
reading its requests (nor the reverse), no token of anyio's default thread limiter (which
the SQLite stores use) is held, and a thread stuck on a pipe the host keeps open never holds
the process up when it exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class OversizedLine:
    """A line that passed the size limit; its bytes are dropped up to its newline."""

    limit_bytes: int


class LineSplitter:
    """Cuts a byte stream into newline-terminated lines of at most ``max_bytes`` each.

    It holds at most ``max_bytes`` of a line: a longer one is reported once, as soon as it
    passes the limit, and the rest of it is dropped as it comes.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._line = bytearray()
        self._dropping = False

    def feed(self, chunk: bytes) -> list[bytes | OversizedLine]:
        """The lines (or oversized reports) that ``chunk`` completes, in order."""
        out: list[bytes | OversizedLine] = []
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not self._dropping:
                if len(self._line) + len(piece) > self._max:
                    self._dropping = True
                    self._line.clear()
                    out.append(OversizedLine(self._max))
                else:
                    self._line += piece
            if end < 0:
                break
            if not self._dropping:
                out.append(bytes(self._line))
            self._line.clear()
            self._dropping = False
            start = end + 1
        return out

    def end(self) -> list[bytes | OversizedLine]:
        """The last line, when the stream ended without a newline after it."""
        line, self._line = bytes(self._line), bytearray()
        return [line] if line and not self._dropping else []


Lines = list[bytes | OversizedLine]


def read_lines(
    fd: int, *, max_bytes: int, chunk_bytes: int = CHUNK_BYTES
) -> MemoryObjectReceiveStream[Lines]:
    """Start reading lines from ``fd`` in a daemon thread; the stream ends at end of file.

    The thread hands over the lines each read completes, together, and waits until they are
    taken: at most one chunk and one line are held however fast the host writes, and the
    lines of one write are handled one after the other without a pause between them. Call
    it in the event loop.
    """
    send, receive = anyio.create_memory_object_stream[Lines](0)
    token = anyio.lowlevel.current_token()

    def hand_over(item: Lines) -> bool:
        try:
            anyio.from_thread.run(send.send, item, token=token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.RunFinishedError):
            return False  # nobody reads any more
        return True

    def pump() -> None:
        splitter = LineSplitter(max_bytes)
        try:
            while True:
                try:
                    chunk = os.read(fd, chunk_bytes)
                except OSError as exc:
                    log.warning("reading the protocol's input failed: %s", exc)
                    return
                items = splitter.feed(chunk) if chunk else splitter.end()
                if items and not hand_over(items):
                    return
                if not chunk:
                    return
        finally:
            with contextlib.suppress(anyio.RunFinishedError):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="core-agent stdio reader", daemon=True).start()
    return receive


class LineWriter:
    """Writes lines to ``fd`` from one daemon thread, whole and in the order they were sent.

    ``send`` never blocks the event loop (the queue is unbounded: a host that stops reading
    makes it grow, it does not stall the kernel). When the host closes its end, the lines
    still queued and any sent later are dropped and ``on_broken`` is called in the event
    loop.
    """

    def __init__(self, fd: int, *, on_broken: Callable[[], None] | None = None) -> None:
        self._fd = fd
        self._on_broken = on_broken
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._pump, name="core-agent stdio writer", daemon=True
        )
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._closed = False

    def start(self) -> None:
        """Start the writing thread; call it in the event loop."""
        self._token = anyio.lowlevel.current_token()
        self._thread.start()

    def send(self, line: bytes) -> None:
        """Queue ``line`` (one message, ending with a newline); ignored once closed."""
        if not self._closed:
            self._queue.put(line)

    def close(self) -> None:
        """Write what is queued, then stop."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)

    async def wait_closed(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the queued lines to be written; whether they were."""
        if self._thread.is_alive():
            await anyio.to_thread.run_sync(self._thread.join, timeout_s, abandon_on_cancel=True)
        return not self._thread.is_alive()

    def _pump(self) -> None:
        broken = False
        while True:
            batch = [self._queue.get()]
            # A burst of notifications goes out in one write.
            while batch[-1] is not None and len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            data = b"".join(line for line in batch if line is not None)
            if data and not broken:
                broken = not self._write_all(data)
                if broken and self._on_broken is not None and self._token is not None:
                    with contextlib.suppress(anyio.RunFinishedError):
                        anyio.from_thread.run_sync(self._on_broken, token=self._token)
            if batch[-1] is None:
                return

    def _write_all(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except OSError as exc:
                log.warning("the host stopped reading the protocol's output: %s", exc)
                return False
            view = view[written:]
        return True
