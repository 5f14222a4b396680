"""Ends an unconfined command's processes when the process that started them dies.

A confined command's keeper does this (a death signal, then its whole tree). An unconfined
command is a plain child in a process group of its own: killed with SIGKILL, or crashing, the
host leaves it running, and the task's recovery may run it again beside it. So each unconfined
command gets a watcher, a shell in a session of its own, reading a pipe whose only writing
end the host holds and never writes to: the read ends when the host does, by any death, and
the watcher then kills the command's process group. A command ending normally stops its
watcher first. Processes that leave the group (``setsid``, daemons) are not followed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import anyio
import anyio.abc

# "read" returns at the end of input: the host's end closed, which only its exit does.
_WATCH = 'read _ ; kill -s KILL -- "-$1"'


class HostDeathWatch:
    """The watcher of one command's process group; ``stop`` it once the command ended."""

    def __init__(self, watcher: anyio.abc.Process, host_end: int) -> None:
        self._watcher = watcher
        self._host_end = host_end

    @classmethod
    async def start(cls, group: int) -> HostDeathWatch:
        """Watch process group ``group`` (the command's pid, as it leads its own session).

        Raises:
            OSError: The watcher could not be started (no ``sh``).
        """
        watcher_end, host_end = os.pipe()  # both ends close on exec: no other child keeps one
        try:
            watcher = await anyio.open_process(
                [shutil.which("sh") or "/bin/sh", "-c", _WATCH, "watch", str(group)],
                stdin=watcher_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the host does not stop it
            )
        except BaseException:
            os.close(host_end)
            raise
        finally:
            os.close(watcher_end)
        return cls(watcher, host_end)

    async def stop(self) -> None:
        """Stop watching; call it before the command's process is reaped (its pid then frees)."""
        with contextlib.suppress(ProcessLookupError):
            self._watcher.kill()
        try:
            with anyio.CancelScope(shield=True):  # stopped on the way out of a cancelled run
                await self._watcher.aclose()
        finally:
            os.close(self._host_end)
