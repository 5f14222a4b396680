"""The launcher process: a small, single-threaded process that starts confined commands.

The kernel starts it once (``python -I -S launcher.py FD``) and sends it one message per
command on a Unix socket: the confinement policy as JSON, plus three descriptors (the
command's own socket, its stdout and its stderr pipes). For each, the launcher forks a keeper
(``confined_child.keep``), which confines and runs the command and reports to the kernel on
the command's socket. Forking here rather than in the kernel costs about a millisecond
whatever the kernel's size, and needs no code between ``fork`` and ``exec`` in a
multi-threaded process.

The launcher ends when the kernel's end of the socket closes. It never runs a command
unconfined: a policy it cannot apply fails that command. Run as root, it forks each keeper
inside a pids cgroup of its own (``pids_cgroups``), since Linux lets root pass
``RLIMIT_NPROC``.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.sandbox.confined_child import NamespaceReaper
    from providers.sandbox.pids_cgroups import PidsCgroups

MAX_MESSAGE_BYTES = 1 << 20
GRANTS_TTL_S = 60.0
_EXIT_SETUP_FAILED = 126  # as confined_child reports a keeper that could not set up
PROCESSES_TTL_S = 1.0
COLLECT_EVERY = 500  # requests between two garbage collections in the launcher
MAX_CACHED_DESCRIPTORS = 4096  # the launcher's cached plans hold at most this many


class _Plan:
    """One system path's planned rules and what they were planned from."""

    def __init__(self, rules: Any, signature: tuple[Any, ...], now: float) -> None:
        self.rules = rules
        self.signature = signature
        self.planned_at = now
        self.used_at = now

    def close(self) -> None:
        for fd, _ in self.rules:
            with contextlib.suppress(OSError):
                os.close(fd)


class SystemGrants:
    """Rules for the system paths, planned once and reused while the directories hold still.

    Secrets under the readable system directories (``/etc/shadow``...) are cut out of the
    grants entry by entry; doing that for every command would cost more than starting it. A
    plan holds descriptors of the entries it grants, so it is renewed as soon as one of the
    directories it split changes (an entry added, removed or renamed: a new ``resolv.conf``
    is readable by the next command), and at least every ``GRANTS_TTL_S``. Plans not used for
    that long are dropped, and the cache never holds more than ``MAX_CACHED_DESCRIPTORS``.
    The count of the user's processes is cached for a second.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._running: tuple[float, int] | None = None
        self._last: tuple[bool, dict[str, Any]] | None = None

    def prepared(self, policy: Mapping[str, Any]) -> dict[str, Any]:
        """Planned rules for the policy's system paths (see ``confined_child.plan_grant``).

        Raises:
            TypeError, ValueError, AttributeError: The policy is malformed.
        """
        from providers.sandbox import confined_child, landlock

        carved = dict(policy.get("carved", {}))
        now = time.monotonic()
        self._evict(now)
        out = {}
        for path in policy.get("system_read", ()):
            prefix = path.rstrip("/") + "/"
            # Read grants only split around hidden paths (read-only ones read all the same).
            inside = tuple(
                sorted((c, k) for c, k in carved.items() if k == "hidden" and c.startswith(prefix))
            )
            key = (path, inside)
            signature = _signature(path, [c for c, _ in inside])
            cached = self._plans.get(key)
            if (
                cached is None
                or cached.signature != signature
                or now - cached.planned_at > GRANTS_TTL_S
            ):
                if cached is not None:
                    cached.close()
                rules = confined_child.plan_grant(path, landlock.READ_RIGHTS, dict(inside))
                cached = self._plans[key] = _Plan(rules, signature, now)
            cached.used_at = now
            out[path] = cached.rules
        self._last = (bool(policy.get("network")), out)
        return out

    def _evict(self, now: float) -> None:
        for key, plan in list(self._plans.items()):
            if now - plan.used_at > GRANTS_TTL_S:
                plan.close()
                del self._plans[key]
        held = sum(len(plan.rules) for plan in self._plans.values())
        for key, plan in sorted(self._plans.items(), key=lambda item: item[1].used_at):
            if held <= MAX_CACHED_DESCRIPTORS:
                break
            held -= len(plan.rules)
            plan.close()
            del self._plans[key]

    def start_ruleset(self, abi: int) -> Any:
        """A ``StartedRuleset`` with the rules the last request's system paths had, if any."""
        from providers.sandbox import confined_child

        if self._last is None:
            return None
        network, plans = self._last
        return confined_child.StartedRuleset(abi, network, plans)

    def running(self) -> int:
        """How many processes the user runs (refreshed at most every second)."""
        from providers.sandbox import confined_child

        now = time.monotonic()
        if self._running is None or now - self._running[0] > PROCESSES_TTL_S:
            self._running = (now, confined_child.processes_of(os.getuid()))
        return self._running[1]


def _signature(path: str, carved: list[str]) -> tuple[Any, ...]:
    """The identity and last change of every directory a plan for ``path`` splits."""
    directories = {path}
    for inner in carved:
        parent = os.path.dirname(inner)
        while parent.startswith(path) and parent not in directories:
            directories.add(parent)
            parent = os.path.dirname(parent)
    stamps: list[tuple[Any, ...]] = []
    for directory in sorted(directories):
        try:
            info = os.stat(directory)
        except OSError:
            stamps.append((directory, None))
        else:
            stamps.append((directory, info.st_dev, info.st_ino, info.st_mtime_ns))
    return tuple(stamps)


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
    """Answer spawn requests until the kernel closes its end.

    Each request goes to the spare keeper when it entered the namespaces the request needs
    (else to a keeper forked for it), and a new spare is forked right after.
    """
    from providers.sandbox import confined_child, landlock, seccomp
    from providers.sandbox.pids_cgroups import PidsCgroups

    abi = landlock.abi_version()
    namespaces = probe_namespaces()
    # RLIMIT_NPROC binds every user but root; root's commands get a pids cgroup instead.
    cgroups = PidsCgroups.open() if os.geteuid() == 0 else None
    process_limit = "rlimit" if os.geteuid() != 0 else "cgroup" if cgroups else "none"
    # Commands inherit ignored signals across execve: start them from the defaults, except
    # for the few the keepers reset themselves (confined_child.RESET_SIGNALS).
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # Linux reaps the keepers itself
    # And what a keeper or spare leaves when it ends first: a namespace's reaper (whose end
    # waits for every process of its namespace to be reaped), or a command whose keeper was
    # killed. Without this they would wait for the host's init, which may never reap.
    with contextlib.suppress(confined_child.SetupError):
        confined_child.adopt_orphans()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hello = {
        "hello": True,
        "pid": os.getpid(),
        "abi": abi,
        "namespaces": namespaces,
        "seccomp": seccomp.supported(),
        "process_limit": process_limit,
    }
    control.send(json.dumps(hello).encode())
    # Keepers are forked from this process and live for one command: a collection in one
    # would touch (and so copy) every page it shares with the launcher. The launcher itself
    # collects now and then, between requests.
    gc.disable()
    grants = SystemGrants()
    if seccomp.supported():
        for network, modes, times in itertools.product((False, True), repeat=3):
            seccomp.build(network=network, modes=modes, times=times)  # kept for the keepers
    network_namespace = 0 if seccomp.supported() else confined_child.CLONE_NEWNET
    base = confined_child.SPARE_NAMESPACES | network_namespace
    children = ForkedChildren()
    spare = Spare.start(control, abi, base if namespaces else 0, grants, cgroups, children)
    spare = _serve_requests(control, abi, namespaces, grants, cgroups, spare, children)
    if spare is not None:
        spare.channel.close()  # it exits, leaving its cgroup empty
    if cgroups is not None:
        cgroups.close(wait_s=2.5)  # keepers killing their commands take up to 2 s


def _serve_requests(
    control: socket.socket, abi: int, namespaces: bool, grants: SystemGrants,
    cgroups: PidsCgroups | None, spare: Spare | None, children: ForkedChildren,
) -> Spare | None:  # fmt: skip
    """The launcher's loop; returns the spare it has when the kernel's end closes.

    Between requests it also wakes when a keeper or spare it forked ends, and kills what
    such a process left to it (``kill_adopted``).
    """
    from providers.sandbox import confined_child

    served = 0
    children.poller.register(control.fileno(), select.POLLIN | select.POLLHUP)
    while True:
        if not children.wait_for(control.fileno()):
            children.recheck = kill_adopted(children.pids) > 0
            continue
        try:
            # Close-on-exec: no command may inherit its keeper's socket (it could forge the
            # keeper's reports) or another descriptor it was not given on purpose.
            data, fds, _, _ = socket.recv_fds(
                control, MAX_MESSAGE_BYTES, 3, socket.MSG_CMSG_CLOEXEC
            )
        except InterruptedError:
            continue
        except OSError:
            return spare
        if not data:
            return spare
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        try:
            policy = json.loads(data)
        except (ValueError, RecursionError):  # its keeper reports the malformed request
            policy = None
        use_namespaces = namespaces and isinstance(policy, dict) and bool(policy.get("namespaces"))
        wanted = 0
        if use_namespaces and isinstance(policy, dict):
            wanted = confined_child.SPARE_NAMESPACES
            if not policy.get("network") and not policy.get("seccomp", True):
                wanted |= confined_child.CLONE_NEWNET
        limit = _process_limit(policy, use_namespaces)
        if spare is None or not spare.hand_over(data, fds, wanted, limit):
            _fork_keeper(control, data, fds, abi, use_namespaces, grants, cgroups, limit, children)
        for fd in fds:
            os.close(fd)
        if isinstance(policy, dict):
            # The next spare inherits these rules, planned now rather than after its fork. A
            # malformed policy fails in its keeper, which reports it; never here.
            with contextlib.suppress(Exception):
                grants.prepared(policy)
                if not use_namespaces:
                    grants.running()
        served += 1
        if served % COLLECT_EVERY == 0:
            gc.collect()
        if cgroups is not None:
            cgroups.sweep()
        flags = wanted if use_namespaces else 0
        spare = Spare.start(control, abi, flags, grants, cgroups, children)


class ForkedChildren:
    """The keepers and spares the launcher forked, each watched through a pidfd.

    Any other child of the launcher (a subreaper) was left to it by one of them that ended
    without cleaning up: a keeper killed from outside leaves its command's processes.
    """

    def __init__(self) -> None:
        self.poller = select.poll()
        self._pidfds: dict[int, int] = {}
        self._unwatched: set[int] = set()
        self.recheck = False
        """Set when the last ``kill_adopted`` left some alive: ``wait_for`` wakes in a second
        to try again."""

    @property
    def pids(self) -> set[int]:
        """The pids of the live children forked here.

        Held by their pidfds, so a pid that ended and came back as another process (a
        keeper forked while the one before ended) is ours as long as one pidfd holds it.
        """
        return {*self._pidfds.values(), *self._unwatched}

    def close_in_child(self) -> None:
        """In a keeper or spare just forked: close the launcher's pidfds of its siblings."""
        for pidfd in self._pidfds:
            with contextlib.suppress(OSError):
                os.close(pidfd)

    def watch(self, pid: int) -> None:
        """Count ``pid`` as forked here, and wake ``wait_for`` when it ends."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # it ended already (the kernel reaped it): nothing of ours has its pid
        except OSError:
            self._unwatched.add(pid)  # stays ours: never mistaken for something it leaves
            return
        self._pidfds[pidfd] = pid
        self.poller.register(pidfd, select.POLLIN)

    def wait_for(self, fd: int) -> bool:
        """Wait until ``fd`` is readable (``True``) or a watched child ended (``False``).

        With ``recheck`` set, a second without either is ``False`` too.
        """
        while True:
            try:
                ready = self.poller.poll(1000 if self.recheck else None)
            except InterruptedError:
                continue
            if not ready:
                return False
            ended = False
            for ready_fd, _ in ready:
                pid = self._pidfds.pop(ready_fd, None)
                if pid is None:
                    continue
                self.poller.unregister(ready_fd)
                os.close(ready_fd)
                ended = True
            if ended:
                return False
            if any(ready_fd == fd for ready_fd, _ in ready):
                return True


def kill_adopted(own: Collection[int]) -> int:
    """Kill the launcher's children that it adopted, and everything below them.

    The launcher is a subreaper: when a keeper dies without cleaning up (killed from
    outside), what its command started comes to the launcher. Its children that are not
    ``own`` (the keepers and spares it forked) are such orphans; they and their descendants
    are stopped, so that none can fork away, then killed, in rounds until none is left or
    ``confined_child.CLEANUP_SECONDS`` have passed (the launcher ignores ``SIGCHLD``: the
    kernel reaps them). Each is signalled through a pidfd opened while its parent was seen
    to be the launcher or a process already stopped here: a pid that ended meanwhile and was
    given to another process on the host is never signalled (the launcher may signal
    anything).
    Returns how many are left alive (0, unless the time ran out).
    """
    from providers.sandbox import confined_child

    me = os.getpid()
    deadline = time.monotonic() + confined_child.CLEANUP_SECONDS
    while True:
        held: list[int] = []
        try:
            pending = [(pid, me) for pid in confined_child.children_of(me) if pid not in own]
            if not pending:
                return 0
            while pending:
                pid, parent = pending.pop()
                pidfd = _pidfd_of_child(pid, parent)
                if pidfd is None:
                    continue
                held.append(pidfd)
                if _signal(pidfd, signal.SIGSTOP):
                    pending.extend((child, pid) for child in confined_child.children_of(pid))
            for pidfd in held:
                _signal(pidfd, signal.SIGKILL)
        finally:
            for pidfd in held:
                os.close(pidfd)
        if time.monotonic() > deadline:
            return len([pid for pid in confined_child.children_of(me) if pid not in own])
        time.sleep(0.001)  # killed processes take a moment to end and be reaped


def _pidfd_of_child(pid: int, parent: int) -> int | None:
    """A pidfd of ``pid`` if it is (still) a child of ``parent``, else ``None``."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        ppid = -1
    # Alive after the read, the pidfd's process is the one whose parent was read.
    if ppid != parent or not _signal(pidfd, 0):
        os.close(pidfd)
        return None
    return pidfd


def _signal(pidfd: int, number: int) -> bool:
    """Send ``number`` through ``pidfd``; whether the process was there to get it."""
    try:
        signal.pidfd_send_signal(pidfd, number)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _process_limit(policy: Any, namespaces: bool) -> int | None:
    """The ``pids.max`` of a request's keeper cgroup: its process limit and the keeper's own.

    Besides the command's processes the cgroup holds the keeper and, in namespaces, the
    reaper (the PID namespace's first process).
    """
    try:
        processes = int(policy["limits"]["processes"])
    except (TypeError, KeyError, ValueError):
        return None  # malformed: its keeper reports it; no limit is needed for that
    if processes <= 0:
        return None
    return processes + (2 if namespaces else 1)


class Spare:
    """A keeper forked (and, with namespaces, already in them) before its command arrives.

    Forking and entering namespaces take about a millisecond each; a spare does both while
    the launcher waits for the next request, so a command starts without them.
    """

    def __init__(
        self, pid: int, channel: socket.socket, flags: int, cgroup: str | None = None
    ) -> None:
        self.pid = pid
        self.channel = channel
        self.flags = flags
        self.cgroup = cgroup

    @classmethod
    def start(
        cls, control: socket.socket, abi: int, flags: int, grants: SystemGrants,
        cgroups: PidsCgroups | None, children: ForkedChildren,
    ) -> Spare | None:  # fmt: skip
        """Fork a spare keeper entering ``flags`` (``None`` if it cannot be forked).

        With ``cgroups`` the spare is born in a cgroup of its own, limited when its request
        comes (``None`` if that cgroup cannot be made). It joins ``children``.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with _in_new_cgroup(cgroups, None) as cgroup:
                pid = os.fork()
                if pid == 0:
                    try:
                        os.close(control.fileno())
                        children.close_in_child()
                        ours.close()
                        _wait_as_spare(theirs, abi, flags, grants)
                    finally:
                        os._exit(_EXIT_SETUP_FAILED)  # never back into the launcher's loop
        except OSError:
            ours.close()
            theirs.close()
            return None
        theirs.close()
        children.watch(pid)
        return cls(pid, ours, flags, cgroup)

    def hand_over(self, data: bytes, fds: list[int], wanted: int, limit: int | None) -> bool:
        """Give the request to this spare if it entered the namespaces it needs.

        ``limit`` is the ``pids.max`` of the spare's cgroup, set before the request reaches
        it. The spare ends either way: with a request it becomes its keeper, without one
        (its channel closed) it exits.
        """
        from providers.sandbox.pids_cgroups import PidsCgroups

        try:
            if self.flags != wanted:
                return False
            if self.cgroup is not None and limit is not None:
                PidsCgroups.limit(self.cgroup, limit)
            socket.send_fds(self.channel, [data], fds)
            return True
        except OSError:
            return False
        finally:
            self.channel.close()


def _wait_as_spare(channel: socket.socket, abi: int, flags: int, grants: SystemGrants) -> None:
    """In a spare: enter ``flags``, wait for one request, then keep its command."""
    from providers.sandbox import confined_child

    failure = None
    reaper = None
    try:
        if flags:
            reaper = confined_child.enter(flags)
    except Exception as exc:  # reported to the command that comes, as its keeper would
        failure = f"{type(exc).__name__}: {exc}"
    started = None
    if failure is None:
        with contextlib.suppress(OSError):  # the keeper then builds the whole ruleset itself
            started = grants.start_ruleset(abi)
    try:
        data, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE_BYTES, 3, socket.MSG_CMSG_CLOEXEC)
    except OSError:
        return  # the client sees its command socket close and reports the failed start
    if not data or len(fds) != 3:
        return  # the launcher ended, or replaced this spare
    channel.close()
    if failure is not None:
        with contextlib.suppress(OSError):
            socket.socket(fileno=fds[0]).send(json.dumps({"setup_error": failure}).encode())
        return
    _keep_request(
        data, fds, abi, bool(flags), grants, entered=flags, started=started, reaper=reaper
    )


@contextlib.contextmanager
def _in_new_cgroup(cgroups: PidsCgroups | None, limit: int | None) -> Iterator[str | None]:
    """The launcher in a new cgroup of ``cgroups`` for the block (fork in it); its path.

    Without cgroups, nothing (``None``).

    Raises:
        OSError: The cgroup cannot be made or joined.
    """
    if cgroups is None:
        yield None
        return
    cgroup = cgroups.make(limit)
    with cgroups.joined(cgroup):
        yield cgroup


def _fork_keeper(
    control: socket.socket, data: bytes, fds: list[int], abi: int, namespaces: bool,
    grants: SystemGrants, cgroups: PidsCgroups | None, limit: int | None,
    children: ForkedChildren,
) -> None:  # fmt: skip
    """Start a keeper for a request no spare could take (in a cgroup of its own, if any).

    It joins ``children``. A keeper that cannot be put in its cgroup is not started: its
    command fails.
    """
    try:
        with _in_new_cgroup(cgroups, limit):
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(control.fileno())
                    children.close_in_child()
                    _keep_request(
                        data, fds, abi, namespaces, grants, entered=0, started=None, reaper=None
                    )
                finally:
                    os._exit(_EXIT_SETUP_FAILED)  # never back into the launcher's loop
    except OSError as exc:
        failure = f"the command's process limit cannot be set: {exc}"
        # A duplicate: the launcher closes the descriptors it received itself.
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fds[0])) as command:
            command.send(json.dumps({"setup_error": failure}).encode())
        return
    children.watch(pid)


def _keep_request(
    data: bytes, fds: list[int], abi: int, namespaces: bool, grants: SystemGrants, *,
    entered: int, started: Any, reaper: NamespaceReaper | None,
) -> None:  # fmt: skip
    """In a keeper: read the request's policy and keep its command (never returns).

    ``entered``: the namespaces a spare already entered; ``started``: its ``StartedRuleset``;
    ``reaper``: the ``NamespaceReaper`` of the PID namespace it entered.
    """
    from providers.sandbox import confined_child

    command_fd, stdout, stderr = fds
    command = socket.socket(fileno=command_fd)
    try:
        policy = json.loads(data)
        if not isinstance(policy, dict):
            raise ValueError(policy)
    except (ValueError, RecursionError):
        with contextlib.suppress(OSError):
            command.send(b'{"setup_error": "the launcher received a malformed request"}')
        return
    prepared: dict[str, Any] | None = None
    running = None
    try:
        prepared = {"plans": grants.prepared(policy), "started": started}
        running = None if namespaces else grants.running()
    except Exception:
        prepared = running = None  # the keeper plans for itself, and reports what is wrong
    confined_child.keep(
        policy, command, stdout, stderr, abi, namespaces, prepared, running,
        entered=entered, reaper=reaper,
    )  # fmt: skip


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
