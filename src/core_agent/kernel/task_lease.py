"""Who runs a task, and for how long: the owner's lease and the watch that keeps it.

A kernel names itself with an owner string (host, process, a random part) and takes a lease
on each task it runs. While the task runs, a watch renews the lease every third of its
length and looks for a cancel request from another process; a task whose lease ran out (its
process died, or stalled past it) may be taken over by another kernel, and the watch of the
old owner then stops its run without writing anything more for it.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio

from core_agent.contracts.task_store import ITaskStore


def new_owner() -> str:
    """An owner string that tells which kernel, where, runs a task."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
