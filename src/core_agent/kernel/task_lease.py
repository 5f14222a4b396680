"""Who runs a task, and for how long: the owner's lease and the watch that keeps it.

A kernel names itself with an owner string (host, process, a random part) and takes a lease
on each task it runs. While the task runs, a watch renews the lease every third of its
length and looks for a cancel request from another process; a task whose lease ran out (its
process died, or stalled past it) may be taken over by another kernel, and the watch of the
old owner then stops its run without writing anything more for it.

A lease is the only proof of life across machines, but on one machine a dead owner can be
told at once: its owner string names the host, the PID namespace and the process, and a
process that no longer exists is not running anything (``owner_is_dead``). So a desktop app
restarted after a crash takes its tasks back without waiting for their leases to run out.
"""

from __future__ import annotations

import functools
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from core_agent.contracts.task_store import ITaskStore


@functools.cache
def _machine() -> str:
    """This host; on Linux also its boot and PID namespace.

    Machines may share a hostname, and containers on one host share one too: the boot id
    tells machines apart, the namespace containers.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{socket.gethostname()}/{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return socket.gethostname()


def new_owner() -> str:
    """An owner string that tells which kernel, where, runs a task: ``machine:pid:random``."""
    return f"{_machine()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str) -> bool:
    """Whether ``owner`` is a kernel of a process on this machine that no longer exists.

    ``False`` when it cannot be known here (another machine or namespace, an owner string of
    another form, a process that exists or that we may not signal): the lease decides then.
    """
    if os.name != "posix":
        return False  # os.kill(pid, 0) is no probe there (signal 0 is CTRL_C_EVENT)
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != _machine() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid() or pid <= 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def lease_until(lease_s: float) -> datetime:
    """When a lease taken now ends."""
    return datetime.now(UTC) + timedelta(seconds=lease_s)


@dataclass(slots=True)
class LeaseWatch:
    """Keeps one running task's lease and stops its run when asked to (see the module).

    ``cancel_reason`` is set when another process asked for the task to be canceled;
    ``lost`` when another kernel took the task over.
    """

    task_store: ITaskStore
    task_id: str
    owner: str
    lease_s: float
    check_s: float
    cancel_reason: str | None = None
    lost: bool = False

    async def run(self, stop: anyio.CancelScope) -> None:
        """Watch until cancelled; cancel ``stop`` on a cancel request or a lost lease."""
        renewed = time.monotonic()
        while True:
            await anyio.sleep(min(self.check_s, self.lease_s / 3))
            requests = await self.task_store.cancel_requests([self.task_id])
            if self.task_id in requests:
                self.cancel_reason = requests[self.task_id] or "canceled by another process"
                stop.cancel()
                return
            if time.monotonic() - renewed >= self.lease_s / 3:
                kept = await self.task_store.renew_leases(
                    self.owner, [self.task_id], until=lease_until(self.lease_s)
                )
                if self.task_id not in kept:
                    self.lost = True
                    stop.cancel()
                    return
                renewed = time.monotonic()
