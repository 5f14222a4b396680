"""The kernel's side of the launcher process: start it, send it commands, follow them.

``CommandLauncher`` starts ``launcher.py`` on first use and sends one message per command.
Each command gets its own socket to its keeper, which reports ``started``, setup or exec
errors and ``exit``; the command's output arrives on two pipes the kernel created. Asking the
keeper to ``kill`` (or closing the socket) ends the command and everything it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from core_agent.contracts.errors import ConfinementUnavailableError

LAUNCHER = Path(__file__).with_name("launcher.py")
_START_TIMEOUT_S = 30.0
_READ_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class LauncherInfo:
    """What the launcher found it can do on this machine."""

    pid: int
    landlock_abi: int
    namespaces: bool
    seccomp: bool
    process_limit: str = "rlimit"
    """How commands' process limit holds: ``rlimit`` (``RLIMIT_NPROC``, any user but root),
    ``cgroup`` (a pids cgroup per command, for root), or ``none`` (root, and no cgroup could
    be made: the limit does not hold)."""


class ConfinedProcess:
    """One running command: its output pipes and the socket to its keeper."""

    def __init__(self, sock: socket.socket, stdout: int, stderr: int) -> None:
        self._sock = sock
        self.stdout = stdout
        self.stderr = stderr
        self.pid: int | None = None
        self.namespaces = False
        self.started = False
        """The keeper confined and started the command (a setup failure leaves it ``False``)."""
        self.returncode: int | None = None
        self.errors: list[str] = []
        self._closed = False

    async def message(self) -> dict[str, Any] | None:
        """The keeper's next report; ``None`` once its socket closed."""
        while True:
            try:
                data = self._sock.recv(_READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError:
                return None
            if not data:
                return None
            try:
                decoded = json.loads(data)
            except ValueError:
                return {"setup_error": f"unreadable report from the keeper: {data[:200]!r}"}
            return decoded if isinstance(decoded, dict) else {}

    def _note(self, report: Mapping[str, Any]) -> None:
        if "started" in report:
            self.started = True
            self.pid = int(report["started"])
            self.namespaces = bool(report.get("namespaces"))
        for key in ("setup_error", "exec_error"):
            if key in report:
                self.errors.append(str(report[key]))
        if "setup_error" in report:
            self.started = False
        if "exit" in report:
            self.returncode = int(report["exit"])

    async def ended(self) -> int:
        """The exit code (negative: killed by that signal) once the keeper reported it."""
        while self.returncode is None:
            report = await self.message()
            if report is None:
                self.errors.append("the keeper ended without reporting how the command ended")
                self.returncode = -9
                break
            self._note(report)
        return self.returncode

    def check_started(self) -> None:
        """Raise when the confinement could not be set up (after ``ended``).

        Raises:
            ConfinementUnavailableError: Nothing ran; the reason says why.
        """
        if not self.started:
            reason = "; ".join(self.errors) or "the keeper ended before starting the command"
            raise ConfinementUnavailableError(f"the command was not started: {reason}")

    async def wait(self) -> int:
        """``ended``, then ``check_started``: the exit code of a command that ran.

        Raises:
            ConfinementUnavailableError: The confinement could not be set up (nothing ran).
        """
        code = await self.ended()
        self.check_started()
        return code

    def kill(self) -> None:
        """Ask the keeper to kill the command and everything it started (idempotent)."""
        with contextlib.suppress(OSError):
            self._sock.send(b"kill")

    async def read(self, fd: int) -> bytes:
        """The next chunk of an output pipe; ``b""`` at its end."""
        while True:
            try:
                return os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(fd)

    def close(self) -> None:
        """Release the socket and pipes; the keeper then kills whatever is left."""
        if self._closed:
            return
        self._closed = True
        self._sock.close()
        for fd in (self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                os.close(fd)


class CommandLauncher:
    """Starts confined commands through one launcher process (started on first use)."""

    def __init__(self, python: str | None = None) -> None:
        self._python = python or sys.executable
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._info: LauncherInfo | None = None
        self._owner = os.getpid()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    async def info(self) -> LauncherInfo:
        """Start the launcher if needed and say what it can do.

        Raises:
            ConfinementUnavailableError: The launcher process cannot start.
        """
        if self._info is None or self._owner != os.getpid():
            return await anyio.to_thread.run_sync(self._start)
        return self._info

    def _start(self) -> LauncherInfo:
        with self._lock:
            if self._info is not None and self._owner == os.getpid():
                return self._info
            self._stop_locked()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._process = subprocess.Popen(
                    [self._python, "-I", "-S", str(LAUNCHER), str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    env={},
                    cwd="/",
                    start_new_session=True,
                )
            except OSError as exc:
                ours.close()
                raise ConfinementUnavailableError(f"cannot start the launcher: {exc}") from exc
            finally:
                theirs.close()
            ours.settimeout(_START_TIMEOUT_S)
            try:
                hello = json.loads(ours.recv(_READ_CHUNK) or b"null")
            except (OSError, ValueError) as exc:
                ours.close()
                self._reap_locked()
                raise ConfinementUnavailableError(f"the launcher did not start: {exc}") from exc
            if not isinstance(hello, dict) or not hello.get("hello"):
                ours.close()
                self._reap_locked()
                raise ConfinementUnavailableError("the launcher did not start")
            ours.settimeout(None)
            self._control = ours
            self._owner = os.getpid()
            # A launcher dropped without close() still stops its process (EOF ends it).
            self._finalizer = weakref.finalize(self, _stop, ours, self._process)
            self._info = LauncherInfo(
                pid=int(hello["pid"]),
                landlock_abi=int(hello["abi"]),
                namespaces=bool(hello["namespaces"]),
                seccomp=bool(hello["seccomp"]),
                process_limit=str(hello.get("process_limit", "none")),
            )
            return self._info

    async def spawn(self, policy: Mapping[str, Any]) -> ConfinedProcess:
        """Start one command under ``policy`` (see ``confinement.command_policy``).

        Raises:
            ConfinementUnavailableError: The launcher is gone and cannot be restarted.
        """
        await self.info()
        data = json.dumps(policy).encode()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            for attempt in range(2):
                try:
                    self._send(data, [theirs.fileno(), out_write, err_write])
                    break
                except OSError as exc:
                    if attempt:
                        raise ConfinementUnavailableError(
                            f"the launcher process is gone: {exc}"
                        ) from exc
                    await anyio.to_thread.run_sync(self._restart)
        except BaseException:
            for fd in (out_read, err_read):
                os.close(fd)
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(out_write)
            os.close(err_write)
        ours.setblocking(False)
        os.set_blocking(out_read, False)
        os.set_blocking(err_read, False)
        # Setup failures arrive with the exit report (see ``ConfinedProcess.wait``): not
        # waiting for "started" here saves a round trip per command.
        return ConfinedProcess(ours, out_read, err_read)

    def _send(self, data: bytes, fds: list[int]) -> None:
        with self._lock:
            if self._control is None:
                raise OSError("the launcher is not running")
            socket.send_fds(self._control, [data], fds)

    def _restart(self) -> None:
        with self._lock:
            self._stop_locked()
        self._start()

    def _stop_locked(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._control is not None:
            self._control.close()
            self._control = None
        self._reap_locked()
        self._info = None

    def _reap_locked(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    async def close(self) -> None:
        """Stop the launcher; commands still running are killed by their keepers."""

        def stop() -> None:
            with self._lock:
                self._stop_locked()

        await anyio.to_thread.run_sync(stop)


def _stop(control: socket.socket, process: subprocess.Popen[bytes] | None) -> None:
    control.close()
    if process is not None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
