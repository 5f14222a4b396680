"""Per-command pids cgroups: the process limit where ``RLIMIT_NPROC`` does not hold.

Linux exempts root (user id 0 outside every user namespace) from ``RLIMIT_NPROC``, so a
command started by a kernel that runs as root (a container, a CI machine, a server) could fork
until the machine has no process ids left, and every other program on it fails to start one.
There the launcher puts each keeper, and with it its command and everything the command
starts, in a cgroup of its own whose ``pids.max`` is the command's process limit plus the
keeper. The cgroup comes from ``/proc/self/mountinfo``: the v1 ``pids`` hierarchy, or the
unified (v2) one when the launcher lives at its root (a cgroup that holds processes cannot
hand a controller down, so a systemd service or a container with a cgroup namespace of its
own gets no v2 cgroup). Where none can be made (a container whose cgroup file system is
read-only) the launcher says so and the limit does not hold for root. A confined command
cannot leave its cgroup: the cgroup files are outside what Landlock lets it write, and the
seccomp filter refuses ``clone3``, whose ``CLONE_INTO_CGROUP`` names a v2 cgroup by a
descriptor Landlock does not check.

The launcher joins a command's cgroup for the instant of the fork and then goes back, so the
keeper is born inside it: there is no moment in which it could fork outside. Cgroups of ended
keepers are removed as the launcher goes (the kernel refuses to remove a populated one), and
those of launchers that died are removed by the next one.

Standard library only: it runs in the launcher.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from providers.sandbox.confined_child import unescape_mount_path

PREFIX = "core-agent-sandbox-"


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A mounted cgroup hierarchy holding the ``pids`` controller."""

    version: int
    own: str
    """The directory of the calling process's cgroup in that hierarchy."""


def parse_hierarchy(mountinfo: str, cgroups: str) -> Hierarchy | None:
    """Where the calling process's ``pids`` cgroup is mounted, from the two ``/proc`` files.

    ``mountinfo`` is ``/proc/self/mountinfo``, ``cgroups`` is ``/proc/self/cgroup``. A v1
    ``pids`` hierarchy is preferred; otherwise the unified one (whether it holds ``pids`` is
    for the caller to find out).
    """
    paths: dict[str, str] = {}
    for line in cgroups.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            paths["unified"] = path
        elif "pids" in controllers.split(","):
            paths["pids"] = path
    found: dict[str, Hierarchy] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or dash < 5:
            continue
        root, point = unescape_mount_path(fields[3]), unescape_mount_path(fields[4])
        kind, options = fields[dash + 1], fields[dash + 3].split(",")
        if kind == "cgroup" and "pids" in options and "pids" in paths:
            own = _below_mount(paths["pids"], root, point)
            if own is not None:
                found["pids"] = Hierarchy(1, own)
        elif kind == "cgroup2" and "unified" in paths:
            own = _below_mount(paths["unified"], root, point)
            if own is not None:
                found.setdefault("unified", Hierarchy(2, own))
    return found.get("pids") or found.get("unified")


def _below_mount(path: str, root: str, point: str) -> str | None:
    """The directory of cgroup ``path`` under a mount of the hierarchy's ``root`` at ``point``."""
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None  # this mount does not show the process's cgroup
    return (point.rstrip("/") + path[len(root) :]).rstrip("/") or "/"


class StuckInCgroupError(Exception):
    """The launcher could not go back to its own cgroup: it must end (not an ``OSError``)."""


class PidsCgroups:
    """The launcher's cgroups, one per keeper, below a directory of its own."""

    def __init__(self, hierarchy: Hierarchy, base: str) -> None:
        self._hierarchy = hierarchy
        self._base = base
        self._made = 0
        self._live: list[str] = []

    @classmethod
    def open(cls) -> PidsCgroups | None:
        """This launcher's cgroups, or ``None`` where none can be made (see the module)."""
        try:
            with open("/proc/self/mountinfo") as mounts, open("/proc/self/cgroup") as own:
                hierarchy = parse_hierarchy(mounts.read(), own.read())
        except OSError:
            return None
        if hierarchy is None:
            return None
        _remove_dead_launchers(hierarchy.own)
        base = os.path.join(hierarchy.own, f"{PREFIX}{_identity(os.getpid())}")
        try:
            if hierarchy.version == 2:
                _write(os.path.join(hierarchy.own, "cgroup.subtree_control"), "+pids")
            cgroups = cls(hierarchy, base)
            cgroups._make_base()
            # Proves the whole round before any command relies on it.
            with cgroups.joined(cgroups.make(8)):
                pass
            cgroups.sweep()
        except OSError:
            with contextlib.suppress(OSError):
                _remove_tree(base)
            return None
        return cgroups

    def make(self, limit: int | None) -> str:
        """A new cgroup for one keeper; ``limit``: its ``pids.max`` (``None``: not yet).

        Raises:
            OSError: The cgroup cannot be made.
        """
        self._made += 1
        path = os.path.join(self._base, str(self._made))
        try:
            os.mkdir(path, 0o755)
        except FileNotFoundError:  # the base was removed under us: make it again
            self._make_base()
            os.mkdir(path, 0o755)
        self._live.append(path)
        if limit is not None:
            self.limit(path, limit)
        return path

    def _make_base(self) -> None:
        os.mkdir(self._base, 0o755)
        if self._hierarchy.version == 2:
            _write(os.path.join(self._base, "cgroup.subtree_control"), "+pids")

    @staticmethod
    def limit(path: str, limit: int) -> None:
        """Set the cgroup's ``pids.max`` (it counts processes and threads, zombies included).

        Raises:
            OSError: The limit cannot be set.
        """
        _write(os.path.join(path, "pids.max"), str(limit))

    @contextlib.contextmanager
    def joined(self, path: str) -> Iterator[None]:
        """The calling process in cgroup ``path`` for the block (fork inside it).

        Raises:
            OSError: The process cannot be moved into the cgroup.
            StuckInCgroupError: It cannot be moved back out.
        """
        _write(os.path.join(path, "cgroup.procs"), "0")
        try:
            yield
        finally:
            try:
                _write(os.path.join(self._hierarchy.own, "cgroup.procs"), "0")
            except OSError as exc:
                # Left in a command's cgroup, every later keeper would be born there.
                raise StuckInCgroupError(f"cannot leave {path}: {exc}") from exc

    def sweep(self) -> None:
        """Remove the cgroups whose processes have all ended."""
        live = []
        for path in self._live:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                live.append(path)  # still populated
        self._live = live

    def close(self, wait_s: float = 0.0) -> None:
        """Remove what can be removed, waiting up to ``wait_s`` for keepers to end.

        Cgroups still populated then stay for the next launcher to remove.
        """
        deadline = time.monotonic() + wait_s
        self.sweep()
        while self._live and time.monotonic() < deadline:
            time.sleep(0.005)
            self.sweep()
        with contextlib.suppress(OSError):
            os.rmdir(self._base)


def _remove_dead_launchers(own: str) -> None:
    try:
        entries = list(os.scandir(own))
    except OSError:
        return
    here = _pid_namespace()
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        pid, _, rest = entry.name[len(PREFIX) :].partition("-")
        namespace = rest.partition("-")[0]
        if not pid.isdigit() or namespace != str(here):
            continue  # a launcher of another PID namespace: its pid means nothing here
        if _identity(int(pid), here) != entry.name[len(PREFIX) :]:  # ended, or pid reused
            with contextlib.suppress(OSError):
                _remove_tree(entry.path)


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def _identity(pid: int, namespace: int | None = None) -> str:
    """``pid``, this PID namespace and the process's start time: unique while it runs."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            started = stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        started = "gone"
    return f"{pid}-{namespace or _pid_namespace()}-{started}"


def _remove_tree(base: str) -> None:
    """Remove a launcher's directory and its (empty) cgroups; populated ones stay."""
    for entry in os.scandir(base):
        if entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.rmdir(entry.path)
    os.rmdir(base)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
