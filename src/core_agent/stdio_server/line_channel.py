"""Lines in and out of the stdio protocol: bounded reading, serialised writing.

Both sides do their I/O in the event loop when the descriptor is a pipe or a socket (what
a host gives its child): the loop waits until the host's input is readable, and a line goes
out with one ``write`` when the pipe has room for it, so a request, or an event, reaches the
host with no thread in between. What cannot be done that way without blocking the loop goes
through a daemon thread of its own: reading a regular file; writing a line longer than
``PIPE_BUF``, or when the pipe is full, or while earlier lines wait. Writing never blocks the
loop, no token of anyio's default thread limiter (the SQLite stores') is held, and a thread
stuck on a pipe never holds the process up at exit.

The lines waiting for a host that reads slowly are bounded by bytes: past the bound the
writer is ``backed_up``, and its producers either drop what can be dropped or wait in
``wait_for_room`` (see ``server`` for which).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
DEFAULT_MAX_QUEUED_BYTES = 16 * 1024 * 1024
"""Bytes of lines that may wait for the host before the writer is backed up."""
ATOMIC_BYTES = 4096
"""Lines up to this long are written by the event loop when the pipe has room: POSIX's
``PIPE_BUF`` lower bound, which a pipe that polls writable takes whole."""


def _is_pipe_or_socket(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


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


class LineReader:
    """Reads newline-terminated lines from ``fd``, each at most ``max_bytes`` long.

    At most one chunk and one line are held, however fast the host writes.
    """

    def __init__(self, fd: int, *, max_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._fd = fd
        self._chunk_bytes = chunk_bytes
        self._splitter = LineSplitter(max_bytes)
        self._pollable = os.name == "posix" and _is_pipe_or_socket(fd)
        self._limiter = anyio.CapacityLimiter(1)
        self._ended = False

    async def read(self) -> Lines | None:
        """The lines the next read completes, in order (maybe none); ``None`` at the end."""
        if self._ended:
            return None
        try:
            if self._pollable:
                await anyio.wait_readable(self._fd)
                chunk = os.read(self._fd, self._chunk_bytes)  # readable: it does not block
            else:
                chunk = await anyio.to_thread.run_sync(
                    os.read, self._fd, self._chunk_bytes, limiter=self._limiter
                )
        except OSError as exc:
            log.warning("reading the protocol's input failed: %s", exc)
            chunk = b""
        if not chunk:
            self._ended = True
            return self._splitter.end()
        return self._splitter.feed(chunk)


class LineWriter:
    """Writes lines to ``fd``, whole and in the order they were sent (see the module).

    ``send`` never blocks the event loop and always takes the line; once more than
    ``max_queued_bytes`` wait for the host the writer is ``backed_up`` until the host reads
    them, and ``wait_for_room`` is how a producer waits for that. When the host closes its
    end, the lines still queued and any sent later are dropped, ``on_broken`` is called in
    the event loop, and nobody waits for room any more.
    """

    def __init__(
        self,
        fd: int,
        *,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        on_broken: Callable[[], None] | None = None,
    ) -> None:
        self._fd = fd
        self._max_queued_bytes = max_queued_bytes
        self._on_broken = on_broken
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued = 0
        """Lines given to the thread and not written yet: while there are any, later lines
        queue behind them."""
        self._queued_bytes = 0
        self._room: anyio.Event | None = None
        """Set (from the thread) once a backed-up writer has room again; made by a waiter."""
        self._poll: select.poll | None = None
        if hasattr(select, "poll") and _is_pipe_or_socket(fd):
            self._poll = select.poll()
            self._poll.register(fd, select.POLLOUT)
        self._thread = threading.Thread(
            target=self._pump, name="core-agent stdio writer", daemon=True
        )
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._closed = False
        self._broken = False

    @property
    def backed_up(self) -> bool:
        """Whether more than ``max_queued_bytes`` wait for a host that can still read them."""
        return self._queued_bytes > self._max_queued_bytes and not self._closed and not self._broken

    @property
    def queued_bytes(self) -> int:
        """Bytes sent and not written to the host yet."""
        return self._queued_bytes

    def start(self) -> None:
        """Start the writing thread; call it in the event loop."""
        self._token = anyio.lowlevel.current_token()
        self._thread.start()

    def send(self, line: bytes) -> None:
        """Write ``line`` (one message, ending with a newline); ignored once closed."""
        if self._closed or self._broken:
            return
        with self._lock:
            if self._queued == 0 and len(line) <= ATOMIC_BYTES and self._has_room():
                try:
                    written = os.write(self._fd, line)
                except OSError as exc:
                    self._break(exc, in_loop=True)
                    return
                if written == len(line):
                    return
                line = line[written:]
            self._queued += 1
            self._queued_bytes += len(line)
            self._queue.put(line)

    async def wait_for_room(self) -> None:
        """Return once the writer is not ``backed_up`` (at once if it is not)."""
        while self.backed_up:
            room = self._room = self._room or anyio.Event()
            if not self.backed_up:  # the thread made room before it could see the event
                return
            await room.wait()

    def close(self) -> None:
        """Write what is queued, then stop; nobody waits for room any more."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._wake()

    async def wait_closed(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the queued lines to be written; whether they were."""
        if self._thread.is_alive():
            await anyio.to_thread.run_sync(self._thread.join, timeout_s, abandon_on_cancel=True)
        return not self._thread.is_alive()

    def _has_room(self) -> bool:
        if self._poll is None:
            return False
        return any(events & select.POLLOUT for _, events in self._poll.poll(0))

    def _wake(self) -> None:
        """In the event loop: let the waiters for room go on."""
        room, self._room = self._room, None
        if room is not None:
            room.set()

    def _wake_from_thread(self) -> None:
        if self._room is None or self.backed_up or self._token is None:
            return
        with contextlib.suppress(anyio.RunFinishedError):
            anyio.from_thread.run_sync(self._wake, token=self._token)

    def _break(self, exc: OSError, *, in_loop: bool) -> None:
        if self._broken:
            return
        self._broken = True
        log.warning("the host stopped reading the protocol's output: %s", exc)
        if in_loop:
            self._wake()
            if self._on_broken is not None:
                self._on_broken()
            return
        self._wake_from_thread()
        if self._on_broken is not None and self._token is not None:
            with contextlib.suppress(anyio.RunFinishedError):
                anyio.from_thread.run_sync(self._on_broken, token=self._token)

    def _pump(self) -> None:
        while True:
            batch = [self._queue.get()]
            # A burst of lines goes out in one write.
            while batch[-1] is not None and len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines = [line for line in batch if line is not None]
            if lines and not self._broken:
                self._write_all(b"".join(lines))
            with self._lock:
                self._queued -= len(lines)
                self._queued_bytes -= sum(len(line) for line in lines)
            # Outside the lock: the loop may be waiting for it in ``send``.
            self._wake_from_thread()
            if batch[-1] is None:
                return

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except OSError as exc:
                self._break(exc, in_loop=False)
                return
            view = view[written:]
