"""What the kernel keeps of a stdio server's process: its stderr's tail and its process group.

* Its stderr goes to a pipe that a protocol on the servers' loop drains into its last
  ``STDERR_TAIL_BYTES``: a server that writes gigabytes there fills neither the memory nor
  the disk (a file would).
* The SDK starts the server in a session of its own (its pid is the group's id), but kills
  the group only when the server does not exit by itself: a server that started children and
  then exited would leave them running. So the server's pid is found (the child of ours whose
  stderr is this pipe, Linux's ``/proc``) and its whole group is killed when the session ends.
  Elsewhere the pid is unknown and the SDK's own cleanup is all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import IO, TextIO

STDERR_TAIL_BYTES = 4000
GROUP_GRACE_S = 1.0
"""How long what is left of a server's group gets after SIGTERM before SIGKILL."""


class _Drain(asyncio.Protocol):
    def __init__(self) -> None:
        self.tail = bytearray()

    def data_received(self, data: bytes) -> None:
        self.tail += data
        if len(self.tail) > 2 * STDERR_TAIL_BYTES:
            del self.tail[:-STDERR_TAIL_BYTES]


class ServerProcess:
    """The stderr pipe of one run of a stdio server, and then its process group."""

    def __init__(self) -> None:
        """Open the pipe (call ``drain`` on the servers' loop before the server starts)."""
        read_fd, write_fd = os.pipe()
        self._inode = os.fstat(read_fd).st_ino
        self._reader: IO[bytes] = os.fdopen(read_fd, "rb", buffering=0)
        self.errlog: TextIO | None = os.fdopen(write_fd, "w", encoding="utf-8")
        """What the server's stderr is; ``spawned`` closes our copy of it."""
        self._drain = _Drain()
        self._transport: asyncio.BaseTransport | None = None
        self.pid: int | None = None
        self._started_at: str | None = None

    async def drain(self) -> None:
        """Start reading the pipe on the running loop."""
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(lambda: self._drain, self._reader)

    def spawned(self) -> None:
        """After the server started (or failed to): find its pid, close our end of its stderr."""
        self.pid = self._find_pid()
        if self.pid is not None:
            self._started_at = _start_time(self.pid)
        if self.errlog is not None:
            self.errlog.close()
            self.errlog = None

    def alive(self) -> bool:
        """Whether the server's process still runs (``True`` when its pid is unknown)."""
        if self.pid is None:
            return True
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        after_name = stat.rsplit(")", 1)[1].split()
        return after_name[0] != "Z" and after_name[19] == self._started_at

    async def kill_group(self) -> None:
        """SIGTERM what is left of the server's process group, SIGKILL it after a grace."""
        if self.pid is None:
            return
        now = _start_time(self.pid)
        if now is not None and now != self._started_at:
            return  # another process has the pid (the group is gone: ids of live groups stay)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            for _ in range(int(GROUP_GRACE_S / 0.05)):
                await asyncio.sleep(0.05)
                if not _group_alive(self.pid):
                    return

    def tail(self) -> str:
        """The end of what the server wrote on its stderr."""
        return bytes(self._drain.tail[-STDERR_TAIL_BYTES:]).decode("utf-8", errors="replace")

    def close(self) -> None:
        """Stop reading the pipe and close both ends."""
        if self.errlog is not None:
            self.errlog.close()
            self.errlog = None
        if self._transport is not None:
            self._transport.close()
        else:
            self._reader.close()

    def _find_pid(self) -> int | None:
        wanted = f"pipe:[{self._inode}]"
        for children in Path("/proc/self/task").glob("*/children"):
            try:
                pids = children.read_text().split()
            except OSError:
                continue
            for pid in pids:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/2") == wanted:
                        return int(pid)
        return None


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
