"""What a confined command goes through between ``fork`` and ``execve``.

Runs only in the launcher process's children (single-threaded, so Python is safe after fork).
Two processes per command:

* the *keeper* (forked by the launcher) enters new user, mount, PID, IPC and, unless the call
  may use the network, network namespaces when the machine allows them; makes protected paths
  inside writable roots read-only (bind mounts) and hides the data directory (an empty
  read-only tmpfs); forks the command; reports its pid and how it ended on the command's
  socket; and kills everything the command started when it ends, when the kernel asks, or
  when the kernel's end of the socket closes (the kernel died);
* the *command* (the keeper's child, PID 1 of its namespace when there is one) gets a new
  session, its output pipes, default signal handling, resource limits, no capabilities,
  ``no_new_privs``, its Landlock ruleset and the seccomp filter, then ``execve``.

Without namespaces the keeper is a child subreaper: orphans of the command come back to it
and are killed, so nothing outlives the command either way; Landlock alone then keeps
protected paths read-only by granting writable roots entry by entry around them.

Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import resource
import select
import signal
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from providers.sandbox import landlock, seccomp

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_PR_SET_SECUREBITS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT = 28, 24, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and NO_CAP_AMBIENT_RAISE, each with its lock bit.
_SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_EXIT_SETUP_FAILED = 126
_EXIT_EXEC_FAILED = 127
_CLEANUP_ROUNDS = 400

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
)


class SetupError(Exception):
    """A confinement step failed; the command must not run."""


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _call(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(code)}")


def unshare(flags: int) -> None:
    """``unshare(2)``; Python 3.11's ``os`` has no wrapper."""
    _call(_libc.unshare(flags), "unshare")


def map_own_ids(uid: int, gid: int) -> None:
    """Map the caller's ids to themselves in its new user namespace."""
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None) -> None:
    encoded = [None if v is None else v.encode() for v in (source, target, kind, data)]
    if _libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        code = ctypes.get_errno()
        raise SetupError(f"mount {target}: {os.strerror(code)}")


def _kept_mount_flags(path: str) -> int:
    """The flags a read-only remount must keep (a user namespace may not clear them)."""
    flags = os.statvfs(path).f_flag
    kept = 0
    for st_flag, ms_flag in (
        (os.ST_NOSUID, _MS_NOSUID),
        (os.ST_NODEV, _MS_NODEV),
        (os.ST_NOEXEC, _MS_NOEXEC),
        (os.ST_NOATIME, _MS_NOATIME),
        (os.ST_NODIRATIME, _MS_NODIRATIME),
        (os.ST_RELATIME, _MS_RELATIME),
    ):
        if flags & st_flag:
            kept |= ms_flag
    return kept


def protect_with_mounts(
    writable: Iterable[str], readonly: Iterable[str], hidden: Iterable[str], private_shm: bool
) -> list[str]:
    """In a new mount namespace: everything read-only but the writable roots.

    Every mount is remounted read-only (which also stops changes of modes, owners and times
    that Landlock does not cover), the writable roots are bound read-write again, protected
    paths inside them read-only on top, hidden directories under an empty read-only tmpfs,
    and ``/dev/shm`` is a private tmpfs. Returns the mount points that could not be made
    read-only (a mount the namespace may not change).

    Raises:
        SetupError: A writable root, protected or hidden path could not be set up.
    """
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
    stuck = []
    for target in _mount_points():
        try:
            flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _kept_mount_flags(target)
            _mount(None, target, None, flags, None)
        except (SetupError, OSError):
            stuck.append(target)
    for path in writable:
        _mount(path, path, None, _MS_BIND | _MS_REC, None)
        _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _kept_mount_flags(path), None)
    for path in readonly:
        _mount(path, path, None, _MS_BIND | _MS_REC, None)
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _kept_mount_flags(path)
        _mount(None, path, None, flags, None)
    for path in hidden:
        if os.path.isdir(path):
            flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
            _mount("tmpfs", path, "tmpfs", flags, "size=4k,mode=0555")
        else:
            _mount("/dev/null", path, None, _MS_BIND, None)
            _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY, None)
    if private_shm and os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=64m")
    return stuck


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace, parents first."""
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if len(fields) > 4:
                points.append(_unescape_mount_path(fields[4]))
    return points


def _unescape_mount_path(text: str) -> str:
    """Mount points escape space, tab, newline and backslash as octal (backslash 040)."""
    if "\\" not in text:
        return text
    out, index = [], 0
    while index < len(text):
        if text[index] == "\\" and text[index + 1 : index + 4].isdigit():
            out.append(chr(int(text[index + 1 : index + 4], 8)))
            index += 4
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def grant(ruleset: landlock.Ruleset, path: str, rights: int, carved: Mapping[str, str]) -> None:
    """Grant ``rights`` beneath ``path``, except on the carved-out paths below it.

    Landlock cannot take a right away below a grant, so around a carved path the grant is
    made entry by entry: its ancestors only get listing, their other entries get
    ``rights``, a ``readonly`` path gets read rights and a ``hidden`` one nothing.
    """
    inner = [c for c in carved if c == path or c.startswith(path.rstrip("/") + "/")]
    if not inner:
        ruleset.allow_path(path, rights)
        return
    if path in carved:
        if carved[path] == "readonly":
            ruleset.allow_path(path, rights & landlock.READ_RIGHTS)
        return
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    ruleset.allow_path(path, landlock.READ_DIR)
    for entry in entries:
        try:
            if entry.is_symlink():
                continue  # its target gets (or lacks) rights of its own
            if entry.is_dir(follow_symlinks=False):
                grant(ruleset, entry.path, rights, carved)
                continue
            fd = os.open(entry.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if entry.path not in carved:
                ruleset.allow_fd(fd, rights)
            elif carved[entry.path] == "readonly":
                ruleset.allow_fd(fd, rights & landlock.READ_RIGHTS)
        finally:
            os.close(fd)


def build_ruleset(policy: Mapping[str, Any], abi: int, carve_writes: bool) -> landlock.Ruleset:
    """The command's Landlock ruleset from the policy the kernel sent."""
    network = bool(policy["network"])
    ruleset = landlock.Ruleset(abi, network=not network, scoped=True)
    carved: dict[str, str] = dict(policy.get("carved", {}))
    for path in policy["read"]:
        grant(ruleset, path, landlock.READ_RIGHTS, carved)
    write_carved = carved if carve_writes else {}
    for path in policy["write"]:
        grant(ruleset, path, landlock.WRITE_RIGHTS, write_carved)
    for path in policy["devices"]:
        ruleset.allow_path(path, landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE)
    return ruleset


def drop_capabilities() -> None:
    """No capabilities now or after ``execve``, even for root.

    Raises:
        SetupError: The process is root (in its namespace) and the drop failed.
    """
    privileged = os.geteuid() == 0 or _has_capabilities()
    if not privileged:
        return
    _call(_libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED_DOWN, 0, 0, 0), "securebits")
    last = int(open("/proc/sys/kernel/cap_last_cap").read().strip())  # noqa: SIM115
    for capability in range(last + 1):
        _call(_libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "capability bounding set")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _call(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _has_capabilities() -> bool:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16) != 0
    return False


def set_limits(limits: Mapping[str, int], per_sandbox_processes: bool) -> None:
    """CPU seconds, data size, file size, open files, processes; no core dumps.

    The process limit counts per user namespace: in a namespace of its own the sandbox
    starts from zero; otherwise every process of the user counts, so the limit is added to
    how many the user already runs.
    """
    table = {
        "cpu_seconds": resource.RLIMIT_CPU,
        "data_bytes": resource.RLIMIT_DATA,
        "file_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
        "processes": resource.RLIMIT_NPROC,
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, which in table.items():
        value = limits.get(name)
        if value and name == "processes" and not per_sandbox_processes:
            value += _processes_of(os.getuid())
        if value:
            _, hard = resource.getrlimit(which)
            ceiling = value if hard == resource.RLIM_INFINITY else min(value, hard)
            # A CPU overrun gets SIGXCPU, then SIGKILL a second later.
            high = (
                ceiling + 1 if name == "cpu_seconds" and hard == resource.RLIM_INFINITY else ceiling
            )
            resource.setrlimit(which, (ceiling, high))


def _processes_of(uid: int) -> int:
    """How many tasks (processes and their threads) the user runs now."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields: dict[str, str] = {}
        try:
            with open(f"/proc/{entry.name}/status") as status:
                for line in status:
                    name, _, value = line.partition(":")
                    if name in ("Uid", "Threads"):
                        fields[name] = value.split()[0]
        except (OSError, IndexError):
            continue
        if fields.get("Uid") == str(uid):
            count += int(fields.get("Threads", "1"))
    return count


def _default_signals() -> None:
    for number in range(1, signal.NSIG):
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _send(sock: socket.socket, message: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(message).encode())


def exec_command(
    policy: Mapping[str, Any], sock: socket.socket, stdout: int, stderr: int, abi: int, *,
    carve_writes: bool, per_sandbox_processes: bool, parent: int,
) -> NoReturn:  # fmt: skip
    """In the command's process: confine it, then ``execve``. Never returns.

    ``parent`` is the pid the keeper has as seen from here (0 from inside a PID namespace).
    """
    try:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(_EXIT_SETUP_FAILED)  # the keeper died before we got here
        os.setsid()
        _default_signals()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.chdir(policy["cwd"])
        os.umask(0o022)
        ruleset = build_ruleset(policy, abi, carve_writes)
        set_limits(policy.get("limits", {}), per_sandbox_processes)
        drop_capabilities()
        ruleset.restrict_self()  # sets no_new_privs first
        if policy.get("seccomp", True):
            writable = bool(policy["writable"])
            program = seccomp.build(
                network=bool(policy["network"]),
                # Without read-only mounts nothing stops a chmod outside the workspace.
                modes=writable and not carve_writes,
                times=writable,
            )
            seccomp.install(program)
        keep = sock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
    except Exception as exc:
        _send(sock, {"setup_error": f"{type(exc).__name__}: {exc}"})
        os._exit(_EXIT_SETUP_FAILED)
    try:
        os.execve(policy["program"], policy["argv"], policy["env"])
    except OSError as exc:
        _send(sock, {"exec_error": f"{policy['argv'][0]}: {exc.strerror or exc}"})
    os._exit(_EXIT_EXEC_FAILED)


def keep(
    policy: Mapping[str, Any], sock: socket.socket, stdout: int, stderr: int, abi: int,
    namespaces: bool,
) -> NoReturn:  # fmt: skip
    """In the keeper process: set up, fork the command, watch it. Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the launcher ignores it; we wait
    carve_writes = True
    try:
        if namespaces:
            flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
            if not policy["network"]:
                flags |= CLONE_NEWNET
            uid, gid = os.getuid(), os.getgid()
            unshare(flags)
            map_own_ids(uid, gid)
            write_roots = tuple(policy["write"])
            carved = dict(policy.get("carved", {}))
            inside = {
                path: kind
                for path, kind in carved.items()
                if any(_below(path, root) for root in write_roots)
            }
            try:
                protect_with_mounts(
                    [w for w in write_roots if w != "/dev/shm" and os.path.isdir(w)],
                    [p for p, k in inside.items() if k == "readonly" and os.path.lexists(p)],
                    [p for p, k in inside.items() if k == "hidden" and os.path.lexists(p)],
                    private_shm="/dev/shm" in write_roots,
                )
                carve_writes = False
            except (SetupError, OSError):
                # Landlock carves around them instead; the host's /dev/shm stays closed.
                carve_writes = True
                policy = {**policy, "write": [w for w in write_roots if w != "/dev/shm"]}
        else:
            _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception as exc:
        _send(sock, {"setup_error": f"{type(exc).__name__}: {exc}"})
        os._exit(_EXIT_SETUP_FAILED)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        exec_command(
            policy, sock, stdout, stderr, abi,
            carve_writes=carve_writes, per_sandbox_processes=namespaces,
            parent=0 if namespaces else me,
        )  # fmt: skip
    os.close(stdout)
    os.close(stderr)
    _send(sock, {"started": me, "child": child, "namespaces": namespaces})
    code = _watch(sock, child, namespaces)
    _send(sock, {"exit": code})
    os._exit(0)


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _watch(sock: socket.socket, child: int, namespaces: bool) -> int:
    """Wait for the command or for the kernel; leave nothing running; the exit code."""
    pidfd = os.pidfd_open(child)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN | select.POLLHUP)
    code: int | None = None
    while code is None:
        for fd, _ in poller.poll():
            if fd == pidfd:
                code = _reap(child)
                break
            try:
                message = sock.recv(64)
            except OSError:
                message = b""
            if not message or message == b"kill":
                _kill_tree(child, namespaces)
                code = _reap(child)
                break
    _kill_tree(child, namespaces)
    os.close(pidfd)
    return code


def _reap(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return -int(signal.SIGKILL)
        except InterruptedError:
            continue
        return os.waitstatus_to_exitcode(status)


def _kill_tree(child: int, namespaces: bool) -> None:
    """SIGKILL the command and everything it started.

    In a PID namespace killing its first process ends all of them. Otherwise the command's
    process group goes first, then every orphan that was handed to this subreaper.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(child, signal.SIGKILL)
    if namespaces:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child, signal.SIGKILL)
    me = os.getpid()
    for _ in range(_CLEANUP_ROUNDS):
        alive = _children(me)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        reaped = False
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped = True
        if not alive and not reaped and not _children(me):
            return
        time.sleep(0.002)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(value) for value in handle.read().split()]
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return []
        raise
