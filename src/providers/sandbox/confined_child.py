"""What a confined command goes through between ``fork`` and ``execve``.

Runs only in the launcher process's children (single-threaded, so Python is safe after fork).
Two processes per command:

* the *keeper* (forked by the launcher) enters new user, mount, PID, IPC and, unless the call
  may use the network, network namespaces when the machine allows them; makes protected paths
  inside writable roots read-only (bind mounts) and hides the data directory (an empty
  read-only tmpfs); forks the command; reports its pid and how it ended on the command's
  socket; and kills everything the command started when it ends, when the kernel asks, or
  when the kernel's end of the socket closes (the kernel died);
* the *command* (the keeper's child) gets a new session, its output pipes, default signal
  handling, resource limits, no capabilities, ``no_new_privs``, its Landlock ruleset and the
  seccomp filter, then ``execve``.

In a PID namespace a third process comes first: its *reaper* (``NamespaceReaper``), PID 1,
forked by the keeper as it enters the namespaces. Orphans of the command go to it, and it
reaps them at once (a command that never waits for the children it did not start itself
would otherwise keep their zombies, which count against its process limit); when it ends,
the kernel kills every process of the namespace.

Without namespaces the keeper is a child subreaper: orphans of the command come back to it
and are killed, so nothing outlives the command either way; Landlock alone then keeps
protected paths read-only by granting writable roots entry by entry around them.

Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
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
_PR_SET_SECUREBITS, _PR_CAP_AMBIENT = 28, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and NO_CAP_AMBIENT_RAISE, each with its lock bit.
_SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_EXIT_SETUP_FAILED = 126
_EXIT_EXEC_FAILED = 127
CLEANUP_SECONDS = 2.0
_REAP_PER_ROUND = 256  # a round reaps at most this many more than it signalled

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


def adopt_orphans() -> None:
    """Make the caller a child subreaper: orphans below it come back to it, not to init."""
    _call(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")


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
    stuck: list[str] = []
    if not _read_only_tree("/"):
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
            _mount("/dev/null", path, None, _MS_BIND, None)  # reads nothing, writes go nowhere
    if private_shm and os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=64m")
    return stuck


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


_SYS_MOUNT_SETATTR = 442  # the same on every architecture
_AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 0x8000, 0x1
_AT_FDCWD = -100


def _read_only_tree(path: str) -> bool:
    """Make every mount at and below ``path`` read-only in one call (Linux 5.12+)."""
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = _libc.syscall(
        _SYS_MOUNT_SETATTR,
        _AT_FDCWD,
        path.encode(),
        _AT_RECURSIVE,
        ctypes.byref(attr),
        ctypes.sizeof(attr),
    )
    return bool(result == 0)


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace, parents first."""
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if len(fields) > 4:
                points.append(unescape_mount_path(fields[4]))
    return points


def unescape_mount_path(text: str) -> str:
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


Grants = list[tuple[int, int]]
"""``O_PATH`` descriptors and the rights to grant beneath each (already fit to its kind)."""


def plan_grant(path: str, rights: int, carved: Mapping[str, str]) -> Grants:
    """The rules that grant ``rights`` beneath ``path`` except on the carved-out paths.

    Landlock cannot take a right away below a grant, so around a carved path the grant is
    made entry by entry: its ancestors only get listing, their other entries get
    ``rights``, a ``readonly`` path gets read rights and a ``hidden`` one nothing. The caller
    owns (and closes) the descriptors.
    """
    kind = carved.get(path)
    if kind == "hidden":
        return []
    if kind == "readonly":
        rights &= landlock.READ_RIGHTS
    prefix = path.rstrip("/") + "/"
    # Only what would lose rights splits the grant: a hidden path always, a read-only one
    # only below a grant that can write.
    inner = [
        c
        for c, k in carved.items()
        if c.startswith(prefix) and (k == "hidden" or rights & ~landlock.READ_RIGHTS)
    ]
    if not inner:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return []
        return [(fd, rights if os.path.isdir(path) else rights & landlock.FILE_RIGHTS)]
    try:
        entries = list(os.scandir(path))
        top = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return []
    planned: Grants = [(top, landlock.READ_DIR)]
    for entry in entries:
        try:
            if entry.is_symlink():
                continue  # its target gets (or lacks) rights of its own
            if entry.is_dir(follow_symlinks=False):
                planned.extend(plan_grant(entry.path, rights, carved))
                continue
            kind = carved.get(entry.path)
            if kind == "hidden":
                continue
            fd = os.open(entry.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        granted = rights & landlock.READ_RIGHTS if kind == "readonly" else rights
        planned.append((fd, granted & landlock.FILE_RIGHTS))
    return planned


def grant(ruleset: landlock.Ruleset, path: str, rights: int, carved: Mapping[str, str]) -> None:
    """Apply ``plan_grant`` to ``ruleset`` and release its descriptors."""
    planned = plan_grant(path, rights, carved)
    try:
        for fd, granted in planned:
            ruleset.allow_prepared(fd, granted)
    finally:
        for fd, _ in planned:
            os.close(fd)


class StartedRuleset:
    """A ruleset already holding the rules of the system paths, made before its request.

    A spare keeper builds it from the launcher's cached plans for the last request (carving
    ``/etc`` takes hundreds of rules); the keeper uses it only when the new request wants the
    same plans and the same network handling, else it starts a ruleset of its own.
    """

    def __init__(self, abi: int, network: bool, plans: Mapping[str, Grants]) -> None:
        self.network = network
        self.plans = dict(plans)
        self.ruleset = landlock.Ruleset(abi, network=not network, scoped=True)
        try:
            for planned in self.plans.values():
                for fd, granted in planned:
                    self.ruleset.allow_prepared(fd, granted)
        except BaseException:
            self.ruleset.close()
            raise

    def fits(self, network: bool, plans: Mapping[str, Grants]) -> bool:
        """Whether it holds exactly these plans (the same cached rules) and network handling."""
        return (
            network == self.network
            and plans.keys() == self.plans.keys()
            and all(plans[path] is planned for path, planned in self.plans.items())
        )


def build_ruleset(
    policy: Mapping[str, Any],
    abi: int,
    carve: bool,
    prepared: Mapping[str, Any] | None = None,
) -> landlock.Ruleset:
    """The command's Landlock ruleset from the policy the kernel sent.

    Secrets under the system paths (``/etc/shadow``...) are always cut out of their grants
    rule by rule. Protected and hidden paths under the workspace are too with ``carve``;
    without, mounts already made them read-only or empty. ``prepared`` holds the launcher's
    cached plans for the system paths (``{"plans": {path: Grants}}``, and maybe
    ``"started"``: a ``StartedRuleset`` holding them already).
    """
    network = bool(policy["network"])
    every_carved: dict[str, str] = dict(policy.get("carved", {}))
    carved = every_carved if carve else {}
    system = set(policy.get("system_read", ()))
    plans: Mapping[str, Grants] = prepared.get("plans", {}) if prepared else {}
    started = prepared.get("started") if prepared else None
    done: Mapping[str, Grants] = {}
    if isinstance(started, StartedRuleset) and started.fits(network, plans):
        ruleset, done = started.ruleset, started.plans
    else:
        if isinstance(started, StartedRuleset):
            started.ruleset.close()
        ruleset = landlock.Ruleset(abi, network=not network, scoped=True)
    for path in policy["read"]:
        if path in done:
            continue
        if path in plans:
            for fd, granted in plans[path]:
                ruleset.allow_prepared(fd, granted)
        else:
            grant(ruleset, path, landlock.READ_RIGHTS, every_carved if path in system else carved)
    for path in policy["write"]:
        grant(ruleset, path, landlock.WRITE_RIGHTS, carved)
    for path in policy["devices"]:
        ruleset.allow_path(path, landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE)
    return ruleset


def drop_capabilities(*, in_user_namespace: bool) -> None:
    """No capabilities now or after ``execve``, even for root.

    Every set is emptied (effective, permitted, inheritable, ambient) and the securebits are
    locked so that running a program as root grants none back; ``no_new_privs`` (set by the
    Landlock restriction) makes ``execve`` ignore file capabilities and set-uid bits, so the
    bounding set no longer matters.

    Raises:
        SetupError: The process is root (in its namespace) and the drop failed.
    """
    privileged = in_user_namespace or os.geteuid() == 0 or _has_capabilities()
    if not privileged:
        return
    _call(_libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED_DOWN, 0, 0, 0), "securebits")
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


def set_limits(
    limits: Mapping[str, int], per_sandbox_processes: bool, running: int | None = None
) -> None:
    """CPU seconds, data size, file size, open files, processes; no core dumps.

    The process limit counts per user namespace: in a namespace of its own the sandbox
    starts from its keeper and reaper, which the limit leaves room for; otherwise every
    process of the user counts, so the limit is added to how many the user already runs
    (``running``, counted now when not given).
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
        if value and name == "processes":
            if per_sandbox_processes:
                value += 2  # the keeper and the namespace's reaper, not the command's
            else:
                value += running if running is not None else processes_of(os.getuid())
        if value:
            _, hard = resource.getrlimit(which)
            ceiling = value if hard == resource.RLIM_INFINITY else min(value, hard)
            # A CPU overrun gets SIGXCPU, then SIGKILL a second later.
            high = (
                ceiling + 1 if name == "cpu_seconds" and hard == resource.RLIM_INFINITY else ceiling
            )
            resource.setrlimit(which, (ceiling, high))


def processes_of(uid: int) -> int:
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


RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD)
"""Signals the launcher's Python does not leave at their default (it reset every other one
when it started): ignored signals survive ``execve``, and a command with SIGPIPE ignored never
stops writing to a closed pipe."""


def reset_signals(numbers: Iterable[int]) -> None:
    """Default handling for ``numbers``, nothing blocked."""
    for number in numbers:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _send(sock: socket.socket, message: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(message).encode())


def confine(
    policy: Mapping[str, Any], abi: int, *, mounted: bool, per_sandbox_processes: bool,
    prepared: Mapping[str, Any] | None = None, running: int | None = None,
) -> None:  # fmt: skip
    """Confine the calling process for good: limits, no capabilities, Landlock, seccomp.

    The keeper confines itself right before it forks the command, which inherits all of it
    (and keeps it across ``execve``): the command's own process then has almost nothing to
    do before ``execve``, which is where the time of a confined start goes.

    Raises:
        SetupError, OSError: A step failed; the command must not run.
    """
    ruleset = build_ruleset(policy, abi, carve=not mounted, prepared=prepared)
    program = None
    if policy.get("seccomp", True):
        writable = bool(policy["writable"])
        program = seccomp.build(
            network=bool(policy["network"]),
            # Without read-only mounts nothing stops a chmod or a touch outside the workspace.
            modes=writable and mounted,
            times=writable and mounted,
        )
    set_limits(policy.get("limits", {}), per_sandbox_processes, running)
    drop_capabilities(in_user_namespace=per_sandbox_processes)
    ruleset.restrict_self()  # sets no_new_privs first
    ruleset.close()
    if program is not None:
        seccomp.install(program)
    reset_signals(RESET_SIGNALS)


def exec_command(
    policy: Mapping[str, Any], sock: socket.socket, stdout: int, stderr: int, abi: int, *,
    parent: int,
) -> NoReturn:  # fmt: skip
    """In the command's process (already confined): a session, its pipes, then ``execve``.

    ``parent`` is the pid the keeper has as seen from here (0 from inside a PID namespace).
    Never returns.
    """
    try:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(_EXIT_SETUP_FAILED)  # the keeper died before we got here
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.chdir(policy["cwd"])
        os.umask(0o022)
        keep = sock.fileno()
        os.set_inheritable(keep, False)  # kept only to report a failed execve
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
        if abi >= 6:
            # A domain of its own below the keeper's: the command cannot signal the keeper
            # (which would leave its processes unwatched), only processes of its own domain.
            landlock.Ruleset(abi, network=False, scoped=True, fs=False).restrict_self()
    except Exception as exc:
        _send(sock, {"setup_error": f"{type(exc).__name__}: {exc}"})
        os._exit(_EXIT_SETUP_FAILED)
    try:
        os.execve(policy["program"], policy["argv"], policy["env"])
    except OSError as exc:
        _send(sock, {"exec_error": f"{policy['argv'][0]}: {exc.strerror or exc}"})
    os._exit(_EXIT_EXEC_FAILED)


SPARE_NAMESPACES = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNS
"""What a spare keeper enters before it knows its command (plus a network namespace where
there is no seccomp filter)."""


def enter(flags: int) -> NamespaceReaper | None:
    """Enter new namespaces (``flags``) with the caller's ids mapped to themselves.

    With a new PID namespace, its first process is started at once: the reaper returned.

    Raises:
        SetupError, OSError: A namespace could not be entered or the reaper not started.
    """
    uid, gid = os.getuid(), os.getgid()
    unshare(flags)
    map_own_ids(uid, gid)
    return NamespaceReaper.start() if flags & CLONE_NEWPID else None


class NamespaceReaper:
    """PID 1 of a command's PID namespace, started by its keeper: it reaps orphans.

    A namespace's first process inherits every orphan in it. Were that the command, a
    program that never waits for children it did not start itself (a plain ``python3 -c``
    whose children leave grandchildren behind) would keep their zombies, which count against
    its process limit, until it ran out. The reaper ignores ``SIGCHLD``, so the kernel reaps
    the orphans handed to it; it holds no descriptor but the read end of a pipe whose write
    end only the keeper has, and it ends when that pipe closes (the keeper ended it or died),
    which makes the kernel kill every process of the namespace.

    It is not confined: forked before the keeper confines itself, it does nothing but wait,
    and the command cannot signal it (PID 1 of its namespace, outside its Landlock domain)
    nor trace it (a less confined process), as it cannot the keeper.
    """

    def __init__(self, pid: int, alive: int) -> None:
        self.pid = pid
        self._alive = alive

    @classmethod
    def start(cls) -> NamespaceReaper:
        """Fork the reaper (the first child since the PID namespace was entered)."""
        alive_r, alive_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.fork()
        except BaseException:
            os.close(alive_r)
            os.close(alive_w)
            raise
        if pid == 0:
            _reap_until_closed(alive_r)
        os.close(alive_r)
        return cls(pid, alive_w)

    def end(self) -> None:
        """Tell the reaper to end (it exits, the kernel kills the namespace); do not wait.

        The keeper cannot signal the reaper once Landlock scopes its signals; closing the
        pipe needs no right. Calling it again does nothing.
        """
        if self._alive >= 0:
            with contextlib.suppress(OSError):
                os.close(self._alive)
            self._alive = -1

    def wait(self) -> None:
        """``end``, then wait until the reaper, and so every process of the namespace, is gone.

        Only once the command is reaped: the reaper's exit waits for every process of the
        namespace to be reaped, those whose parent is the keeper included (the command, and
        its siblings if it made any with ``CLONE_PARENT``, which seccomp refuses where it
        runs): they are reaped here as they end.
        """
        self.end()
        while True:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == self.pid:
                return


def _reap_until_closed(alive: int) -> NoReturn:
    """In the reaper: drop every other descriptor, let the kernel reap, wait for the pipe."""
    try:
        # Ignoring SIGCHLD makes the kernel reap ended children at once, orphans handed to
        # this process included (already-ended ones as they arrive).
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        os.closerange(0, alive)
        os.closerange(alive + 1, 1 << 16)
        while os.read(alive, 1):
            pass
    finally:
        os._exit(0)


def keep(
    policy: Mapping[str, Any], sock: socket.socket, stdout: int, stderr: int, abi: int,
    namespaces: bool, prepared: Mapping[str, Any] | None = None, running: int | None = None,
    entered: int = 0, reaper: NamespaceReaper | None = None,
) -> NoReturn:  # fmt: skip
    """In the keeper process: set up, confine itself, fork the command, watch it.

    ``prepared`` and ``running`` are the launcher's cached system rules and count of the
    user's processes (used without namespaces); ``entered`` the namespaces a spare keeper
    already entered, and ``reaper`` the first process of its PID namespace. Never returns.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the launcher ignores it; we wait
    mounted = False
    try:
        if namespaces:
            # The host's /dev/shm is granted only when a private tmpfs covers it.
            mounted, write_dirs, started = _enter_namespaces(policy, entered)
            reaper = reaper or started
            policy = {**policy, "write": write_dirs}
        else:
            policy = {**policy, "write": [w for w in policy["write"] if w != "/dev/shm"]}
        if not namespaces:
            adopt_orphans()
    except Exception as exc:
        _send(sock, {"setup_error": f"{type(exc).__name__}: {exc}"})
        os._exit(_EXIT_SETUP_FAILED)
    try:
        confine(
            policy, abi, mounted=mounted, per_sandbox_processes=namespaces,
            prepared=prepared, running=running,
        )  # fmt: skip
    except Exception as exc:
        _send(sock, {"setup_error": f"{type(exc).__name__}: {exc}"})
        os._exit(_EXIT_SETUP_FAILED)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        exec_command(policy, sock, stdout, stderr, abi, parent=0 if namespaces else me)
    os.close(stdout)
    os.close(stderr)
    _send(sock, {"started": me, "child": child, "namespaces": namespaces})
    # Landlock (ABI 6+) lets this keeper signal its own command's processes and no other.
    code = _watch(sock, child, reaper if namespaces else None, scoped=abi >= 6)
    _send(sock, {"exit": code})
    os._exit(0)


def _enter_namespaces(
    policy: Mapping[str, Any], entered: int = 0
) -> tuple[bool, list[str], NamespaceReaper | None]:
    """New user, PID and IPC namespaces, and a mount namespace when mounts are needed.

    Mounts are needed when the command may write the workspace (everything read-only but the
    writable directories, protected paths read-only over them and their parents pinned so
    they cannot be renamed away) or when a secret it could read sits below a granted path
    (an empty mount over it; secret files below system paths are carved out of the Landlock
    grants instead, which costs nothing per command).
    Only what exists can be covered: a protected path that does not exist yet could be
    created (carving it out with Landlock would forbid new entries in every directory above
    it), and a symbolic link is covered through its target, which is protected itself when it
    lies in a root.

    Returns whether the mounts (or the lack of any need for them) protect the command, the
    directories it may write, and the reaper of the PID namespace when this entered it.
    """
    writable = bool(policy["writable"])
    write_dirs = [w for w in policy["write"] if w != "/dev/shm"]
    system = set(policy.get("system_read", ()))
    workspace = (*write_dirs, *(path for path in policy["read"] if path not in system))
    granted = (*workspace, *system)
    carved = dict(policy.get("carved", {}))
    # A mount follows a symbolic link: the link is skipped, its target has an entry of its own.
    present = {p: k for p, k in carved.items() if os.path.lexists(p) and not os.path.islink(p)}
    readonly = [
        path
        for path, kind in present.items()
        if kind == "readonly" and writable and _below_any(path, write_dirs)
    ]
    hidden = [
        path
        for path, kind in carved.items()
        if kind == "hidden"
        # Secret files under system paths are carved out of their grants (the launcher's
        # cached plans); a directory still needs a mount, or its names could be listed.
        and (
            os.path.isdir(path)
            if not any(_below(path, root) for root in workspace)
            else os.path.isdir(path) or os.access(path, os.R_OK)
        )
        and any(_below(path, root) for root in granted)
        and path in present
    ]
    needs_mounts = bool(writable or hidden)
    flags = entered
    reaper = None
    if not entered:
        flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC
        if needs_mounts:
            flags |= CLONE_NEWNS
        if not policy["network"] and not policy.get("seccomp", True):
            # Without the seccomp filter an empty network namespace keeps UDP and raw
            # sockets off the network (it costs half a millisecond per command otherwise).
            flags |= CLONE_NEWNET
        reaper = enter(flags)
    if not needs_mounts or not flags & CLONE_NEWNS:
        # Nothing to protect by mounts: no workspace writes, no readable secret below a grant.
        return True, write_dirs, reaper
    private_shm = bool(policy.get("private_shm")) and os.path.isdir("/dev/shm")
    pinned = _parents_between([p for p in (*readonly, *hidden) if os.path.lexists(p)], write_dirs)
    try:
        protect_with_mounts(
            [w for w in (*write_dirs, *pinned) if os.path.isdir(w)],
            [path for path in readonly if os.path.lexists(path)],
            [path for path in hidden if os.path.lexists(path)],
            private_shm=private_shm,
        )
    except (SetupError, OSError):
        return False, write_dirs, reaper
    return True, [*write_dirs, "/dev/shm"] if private_shm else write_dirs, reaper


def _below_any(path: str, roots: Iterable[str]) -> bool:
    return any(_below(path, root) for root in roots)


def _parents_between(paths: Iterable[str], roots: Iterable[str]) -> list[str]:
    """Directories between each writable root and the paths below it.

    Bound onto themselves they become mount points, which cannot be renamed: otherwise
    ``mv state x && mkdir -p state/agent`` would carry a protected mount away and put an
    attacker's directory where the kernel looks for its data.
    """
    found: list[str] = []
    for path in paths:
        for root in roots:
            if not _below(path, root) or path == root:
                continue
            parent = os.path.dirname(path)
            while parent != root and _below(parent, root):
                if parent not in found:
                    found.append(parent)
                parent = os.path.dirname(parent)
    return sorted(found, key=len)


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _watch(sock: socket.socket, child: int, reaper: NamespaceReaper | None, *, scoped: bool) -> int:
    """Wait for the command or for the kernel; leave nothing running; the exit code.

    ``reaper``: the first process of the command's PID namespace (``None`` without one).
    Without namespaces this keeper is the subreaper of the command's orphans: it reaps them
    as they end, or their zombies would count against the command's process limit until it
    ends (a command whose background jobs come and go would run out of processes).
    """
    namespaces = reaper is not None
    pidfd = os.pidfd_open(child)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN | select.POLLHUP)
    ended = -1
    if not namespaces:
        ended, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake, warn_on_full_buffer=False)  # one byte is enough
        signal.signal(signal.SIGCHLD, lambda *_: None)
        poller.register(ended, select.POLLIN)
    code: int | None = None
    while code is None:
        for fd, _ in poller.poll():
            if fd == ended:
                with contextlib.suppress(OSError):
                    os.read(ended, 4096)
                code = _reap_orphans_but(child)
                if code is not None:
                    break
                continue
            if fd == pidfd:
                code = _reap_now(child)
                if code is None:
                    # Ended, but a tracer (one of its own processes) holds its status back:
                    # waiting for it would wait for the tracer. End everything first; then
                    # the status comes back to this keeper.
                    code = _kill_tree(child, reaper, scoped=scoped)
                    if code is None:
                        code = _reap(child)
                break
            try:
                message = sock.recv(64)
            except OSError:
                message = b""
            if not message or message == b"kill":
                code = _kill_tree(child, reaper, scoped=scoped)
                if code is None:
                    code = _reap(child)
                break
    _kill_tree(child, reaper, scoped=scoped)
    if reaper is not None:
        reaper.wait()  # the command is reaped by now
    os.close(pidfd)
    return code


def _reap_orphans_but(child: int) -> int | None:
    """Reap every ended child; the command's exit code if ``child`` was one of them."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if pid == 0:
            return None
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def _reap(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return -int(signal.SIGKILL)
        except InterruptedError:
            continue
        return os.waitstatus_to_exitcode(status)


def _kill_tree(child: int, reaper: NamespaceReaper | None, *, scoped: bool) -> int | None:
    """SIGKILL the command and everything it started.

    In a PID namespace (``reaper``) ending its first process ends all of them. Otherwise,
    when Landlock scopes signals (``scoped``), ``kill(-1)`` reaches exactly the processes of
    this keeper's domain, wherever they moved, in one pass that no fork escapes. Without
    either, every process below this keeper (a subreaper: orphans come back to it) is found
    by walking the ``children`` lists, stopped so that none can fork while the others die,
    then killed. Rounds repeat until nothing is left, or until ``CLEANUP_SECONDS`` have
    passed.

    Returns the command's exit code when this reaped it (without namespaces), else ``None``.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(child, signal.SIGKILL)
    if reaper is not None:
        reaper.end()
        return None
    me = os.getpid()
    code: int | None = None
    deadline = time.monotonic() + CLEANUP_SECONDS
    while True:
        if scoped:
            # It reports success whenever any process exists (those out of scope are skipped
            # quietly), so what is left is told by the walk below.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(-1, signal.SIGKILL)
        alive = _descendants(me)
        if not scoped:
            for number in (signal.SIGSTOP, signal.SIGKILL):
                for pid in alive:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, number)
        reaped, found = _reap_orphans(limit=len(alive) + _REAP_PER_ROUND, child=child)
        code = found if found is not None else code
        if not alive and not reaped:
            return code
        if time.monotonic() > deadline:
            return code
        if not reaped:
            time.sleep(0.001)  # killed processes take a moment to come back as orphans


def _reap_orphans(limit: int, child: int = -1) -> tuple[int, int | None]:
    """Reap up to ``limit`` ended children without waiting; how many, and ``child``'s code."""
    reaped = 0
    code = None
    while reaped < limit:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
        reaped += 1
    return reaped, code


def _reap_now(pid: int) -> int | None:
    """``pid``'s exit code if it can be reaped now (``None`` while a tracer holds it)."""
    while True:
        try:
            found, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -int(signal.SIGKILL)
        except InterruptedError:
            continue
        return os.waitstatus_to_exitcode(status) if found == pid else None


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, through the children of each of their threads."""
    found: list[int] = []
    seen = {root}
    pending = [root]
    while pending:
        pid = pending.pop()
        for child in children_of(pid):
            if child not in seen:
                seen.add(child)
                found.append(child)
                pending.append(child)
    return found


def children_of(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (none once it is gone)."""
    children: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as handle:
                children.extend(int(value) for value in handle.read().split())
        except OSError:
            continue
    return children
