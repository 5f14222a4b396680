"""The launcher process: a small, single-threaded process that starts confined commands.

The kernel starts it once (``python -I -S launcher.py FD``) and sends it one message per
command on a Unix socket: the confinement policy as JSON, plus three descriptors (the
command's own socket, its stdout and its stderr pipes). For each, the launcher forks a keeper
(``confined_child.keep``), which confines and runs the command and reports to the kernel on
the command's socket. Forking here rather than in the kernel costs about a millisecond
whatever the kernel's size, and needs no code between ``fork`` and ``exec`` in a
multi-threaded process.

The launcher ends when the kernel's end of the socket closes. It never runs a command
unconfined: a policy it cannot apply fails that command.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_MESSAGE_BYTES = 1 << 20
GRANTS_TTL_S = 60.0
PROCESSES_TTL_S = 1.0


class SystemGrants:
    """Rules for the system paths, planned once and reused by every command for a while.

    Without namespaces, secrets under the readable system directories (``/etc/shadow``...) are
    cut out of the grants entry by entry; doing that for every command would cost more than
    starting it. A path replaced since (a new inode) is simply not granted until the plan is
    renewed, which fails safe. The count of the user's processes is cached the same way.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], tuple[float, Any]] = {}
        self._running: tuple[float, int] | None = None

    def prepared(self, policy: Mapping[str, Any]) -> dict[str, Any]:
        """Planned rules for the policy's system paths (see ``confined_child.plan_grant``)."""
        from providers.sandbox import confined_child, landlock

        carved = policy.get("carved", {})
        now = time.monotonic()
        out = {}
        for path in policy.get("system_read", ()):
            inside = tuple(sorted((c, k) for c, k in carved.items() if c.startswith(path)))
            key = (path, inside)
            cached = self._plans.get(key)
            if cached is None or now - cached[0] > GRANTS_TTL_S:
                if cached is not None:
                    for fd, _ in cached[1]:
                        os.close(fd)
                plan = confined_child.plan_grant(path, landlock.READ_RIGHTS, carved)
                cached = self._plans[key] = (now, plan)
            out[path] = cached[1]
        return out

    def running(self) -> int:
        """How many processes the user runs (refreshed at most every second)."""
        from providers.sandbox import confined_child

        now = time.monotonic()
        if self._running is None or now - self._running[0] > PROCESSES_TTL_S:
            self._running = (now, confined_child.processes_of(os.getuid()))
        return self._running[1]


def probe_namespaces() -> bool:
    """Whether a child can enter new namespaces and change its mounts (forks to find out)."""
    from providers.sandbox import confined_child as child

    pid = os.fork()
    if pid == 0:
        try:
            uid, gid = os.getuid(), os.getgid()
            child.unshare(
                child.CLONE_NEWUSER
                | child.CLONE_NEWNS
                | child.CLONE_NEWPID
                | child.CLONE_NEWIPC
                | child.CLONE_NEWNET
            )
            child.map_own_ids(uid, gid)
            child.protect_with_mounts((), (), (), private_shm=False)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def serve(control: socket.socket) -> None:
    """Answer spawn requests until the kernel closes its end."""
    from providers.sandbox import confined_child, landlock, seccomp

    abi = landlock.abi_version()
    namespaces = probe_namespaces()
    # Commands inherit ignored signals across execve: start them from the defaults, except
    # for the few the keepers reset themselves (confined_child.RESET_SIGNALS).
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # Linux reaps the keepers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hello = {
        "hello": True,
        "pid": os.getpid(),
        "abi": abi,
        "namespaces": namespaces,
        "seccomp": seccomp.supported(),
    }
    control.send(json.dumps(hello).encode())
    grants = SystemGrants()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE_BYTES, 3)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        command_fd, stdout, stderr = fds
        try:
            policy = json.loads(data)
        except ValueError:
            policy = None
        use_namespaces = namespaces and isinstance(policy, dict) and bool(policy.get("namespaces"))
        prepared = running = None
        if isinstance(policy, dict) and not use_namespaces:
            try:
                prepared, running = grants.prepared(policy), grants.running()
            except (OSError, ValueError, TypeError, KeyError):
                prepared = running = None  # the keeper plans for itself
        pid = os.fork()
        if pid == 0:
            os.close(control.fileno())
            command = socket.socket(fileno=command_fd)
            if not isinstance(policy, dict):
                with contextlib.suppress(OSError):
                    command.send(b'{"setup_error": "the launcher received a malformed request"}')
                os._exit(126)
            confined_child.keep(
                policy, command, stdout, stderr, abi, use_namespaces, prepared, running
            )
        for fd in fds:
            os.close(fd)


def main(argv: list[str]) -> int:
    """Entry point: ``launcher.py CONTROL_FD``."""
    control_fd = int(argv[1])
    os.set_inheritable(control_fd, False)
    control = socket.socket(fileno=control_fd)
    serve(control)
    return 0


if __name__ == "__main__":
    # Started with -I -S: only the standard library is on the path, plus this package's root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main(sys.argv))
