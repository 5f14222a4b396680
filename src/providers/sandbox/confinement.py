"""What a confined command may touch: the policy the launcher applies before ``execve``.

* **Reads**: the workspace roots, the system's programs and libraries (``/usr``, ``/bin``,
  ``/lib*``, ``/opt``, ``/etc`` without its secrets), the kernel's Python installation, the
  directories on the commands' search path, ``/proc`` (other processes' memory and
  environment stay closed: Landlock refuses access across sandbox boundaries), and the paths
  the user adds. Not the user's home, not the data directory.
* **Writes**: a fresh private temporary directory (also ``HOME`` and ``TMPDIR``), and the
  workspace roots only when the call may write (a human approved it, or it was judged a
  workspace write); never a ``.git`` (at any depth), the data directory or the protected
  paths. A new ``.git`` a command makes cannot be stopped (Landlock cannot refuse a name),
  only found after it (``ProtectedEntries.added_since``).
* **Network**: none unless the call's policy allows it; Unix sockets never (a socket file
  such as Docker's is a way out of any sandbox).
* **Processes**: a session and namespaces of their own, resource limits, no capabilities,
  nothing inherited but the output pipes, and nothing left running when the command ends.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from providers.sandbox.paths import PROTECTED_NAMES

SYSTEM_READ_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/etc",
    "/nix/store",
    "/proc",
)
RESOLVER_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf")
SYSTEM_HIDDEN_PATHS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/letsencrypt",
    "/etc/kubernetes",
    "/etc/mysql/debian.cnf",
    "/etc/pki/tls/private",
    "/etc/ipsec.secrets",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/openvpn",
    "/etc/docker/key.json",
    "/etc/sssd",
    "/etc/samba/private",
)
"""Credentials that live below the readable system directories."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PASSED_LOCALE = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")


@dataclass(frozen=True, slots=True)
class CommandLimits:
    """Resource limits of one confined process (0: the system's own)."""

    cpu_seconds: int = 600
    data_bytes: int = 4 << 30
    file_bytes: int = 1 << 30
    processes: int = 512
    open_files: int = 4096


def python_paths() -> tuple[str, ...]:
    """The kernel's Python installation (its prefixes and the interpreter's directory)."""
    found: list[str] = []
    for path in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        real = os.path.realpath(path)
        if real not in found and real != "/":
            found.append(real)
    return tuple(found)


UNSEARCHED_DIRECTORIES = frozenset(
    {
        "node_modules",
        ".venv",
        "venv",
        "site-packages",
        "__pycache__",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
"""Directories of installed dependencies and caches, not searched for ``.git``: they hold most
of a project's directories (a ``node_modules`` alone, tens of thousands) and no repository
anyone runs git in; searching them made every command that writes slow or refused."""
MAX_SCANNED_DIRECTORIES = 10_000
"""How many directories of the roots are searched for protected names before a command that
may write starts (about 15 µs each): a larger workspace cannot have them all found in time."""
MAX_PROTECTED_ENTRIES = 256
"""How many protected entries (``.git``) a command that may write can have kept read-only
(each costs mounts, or Landlock rules, per command)."""


@dataclass(frozen=True, slots=True)
class ProtectedEntries:
    """The entries with a protected name (``.git``) below the roots, each with its identity."""

    found: Mapping[str, tuple[int, int, bool]]
    """Path: device, inode and whether it is a directory (a replaced entry differs)."""
    complete: bool
    """False when the roots hold more than ``MAX_SCANNED_DIRECTORIES`` directories."""

    def refusal(self) -> str | None:
        """Why a command may not write the roots with only these entries protected."""
        if not self.complete:
            return (
                f"the workspace holds more than {MAX_SCANNED_DIRECTORIES} directories, too many "
                "to find every .git in it (the hooks and config your own git would run) and keep "
                "it read-only before a command that writes starts; make AGENT_WORKSPACE_ROOTS "
                "narrower (one project, not a folder of many)"
            )
        if len(self.found) > MAX_PROTECTED_ENTRIES:
            return (
                f"the workspace holds {len(self.found)} .git entries (nested repositories), "
                f"more than the {MAX_PROTECTED_ENTRIES} a command that writes can have kept "
                "read-only; make AGENT_WORKSPACE_ROOTS narrower"
            )
        return None

    def added_since(self, before: ProtectedEntries) -> list[str]:
        """Entries that were not there (or were something else) in ``before``, sorted."""
        return sorted(
            path for path, identity in self.found.items() if before.found.get(path) != identity
        )


def find_protected(roots: Sequence[Path], skip: Sequence[Path] = ()) -> ProtectedEntries:
    """Every entry named like a protected name (``PROTECTED_NAMES``, any case) below the roots.

    Your own git trusts a ``.git`` at any depth (a nested repository, a submodule, a
    worktree's pointer file), so each must stay read-only, not only each root's. Links are
    not followed; protected names, ``skip`` (protected and hidden paths) and dependency and
    cache directories (``UNSEARCHED_DIRECTORIES``) are not searched; a directory that cannot
    be read is passed over. Breadth first, at most ``MAX_SCANNED_DIRECTORIES`` directories
    in all. A full walk, every time: ``ProtectedEntrySearch`` gives the same answer and lists
    again only the directories that changed.
    """
    skipped = frozenset(str(path) for path in skip)
    found: dict[str, tuple[int, int, bool]] = {}
    pending = deque(str(root) for root in roots)
    scanned = 0
    while pending:
        directory = pending.popleft()
        scanned += 1
        if scanned > MAX_SCANNED_DIRECTORIES:
            return ProtectedEntries(found, complete=False)
        try:
            subdirectories, protected = _list_directory(directory, skipped)
        except OSError:
            continue
        found.update(protected)
        pending.extend(subdirectories)
    return ProtectedEntries(found, complete=True)


RACY_MARGIN_NS = 2_000_000_000
"""How long after a directory last changed its listing can be remembered (git's "racy"
timestamps). A directory's times only say it changed when the change falls in a later clock
tick than the times remembered: the file system keeps times to its granularity (a second on
some, such as ext3 and HFS+) and the kernel stamps them from a coarse clock that lags the one
``time.time_ns`` reads by up to a tick (10 ms at most). A change made after a listing began
therefore bears times later than the moment it began less that lag; a listing is remembered
only when the directory's times are older than its beginning by more than this margin, so any
later change shows as different times. Two seconds covers both."""


@dataclass(frozen=True, slots=True)
class _Listing:
    """One directory as it was listed: its identity and times then, and what it held."""

    identity: tuple[int, int, int, int]
    """``st_dev``, ``st_ino``, ``st_mtime_ns`` and ``st_ctime_ns`` (not following a link)."""
    subdirectories: tuple[str, ...]
    """The directories in it to search, in the order listed."""
    protected: tuple[tuple[str, tuple[int, int, bool]], ...]
    """Its entries with a protected name, each with its identity as ``ProtectedEntries``."""

    def holds_for(self, info: os.stat_result) -> bool:
        """Whether the directory, now ``info``, still holds what was listed.

        Creating, removing or renaming an entry sets the directory's mtime and ctime; the
        ctime cannot be set back (only the clock could, and that takes ``CAP_SYS_TIME``), so
        a command that resets the mtime (``touch -d``) still shows. A directory replaced at
        the same path, or a file system mounted on it, has another inode or device. The
        protected entries are checked one by one too (a mount on a ``.git`` changes no
        directory's times); they are few.
        """
        if _identity_and_times(info) != self.identity:
            return False
        return not self.protected or all(
            _identity(path) == identity for path, identity in self.protected
        )


class ProtectedEntrySearch:
    """``find_protected`` of fixed roots, again and again, listing only what changed.

    A command that may write is searched for before and after (``LocalToolSandbox``), and a
    full walk costs about 15 µs a directory; a directory's ``lstat`` about 1.5 µs. So this
    remembers each directory it listed (``_Listing``) and, on the next search, walks the same
    breadth-first order but lists a directory again only when its device, inode, mtime or
    ctime changed, or a protected entry in it is no longer the same. Listings made within
    ``racy_margin_ns`` of the directory's last change are not remembered (see
    ``RACY_MARGIN_NS``). Directories no longer reached are forgotten, so at most
    ``MAX_SCANNED_DIRECTORIES`` listings are held. One search runs at a time (a lock):
    commands run concurrently and search from worker threads.

    What it trusts: that changing a directory's entries sets its ctime to the present, and
    that the wall clock does not go back (a step back larger than the margin, such as an
    administrator setting the date, could hide a change made at the same moment).
    """

    def __init__(
        self,
        roots: Sequence[Path],
        skip: Sequence[Path] = (),
        *,
        racy_margin_ns: int = RACY_MARGIN_NS,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._roots = tuple(str(root) for root in roots)
        self._skipped = frozenset(str(path) for path in skip)
        self._racy_margin_ns = racy_margin_ns
        self._clock = clock
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()
        self.listed = 0
        """How many directories the last search listed (the others it remembered)."""

    @property
    def remembered(self) -> int:
        """How many directory listings are held (those of the last search, not racy)."""
        return len(self._listings)

    def search(self) -> ProtectedEntries:
        """What ``find_protected(roots, skip)`` would return now."""
        with self._lock:
            # Read before any directory is: a change after it bears later times (less the lag).
            settled_before = self._clock() - self._racy_margin_ns
            kept: dict[str, _Listing] = {}
            found: dict[str, tuple[int, int, bool]] = {}
            pending = deque(self._roots)
            visited = listed = 0
            complete = True
            while pending:
                directory = pending.popleft()
                visited += 1
                if visited > MAX_SCANNED_DIRECTORIES:
                    complete = False
                    break
                try:
                    info: os.stat_result | None = os.lstat(directory)
                except OSError:
                    info = None  # listed all the same, as find_protected would
                listing = self._listings.get(directory)
                if listing is None or info is None or not listing.holds_for(info):
                    listed += 1
                    try:
                        subdirectories, protected = _list_directory(directory, self._skipped)
                    except OSError:
                        continue  # and forgotten
                    listing = _Listing(
                        (0, 0, 0, 0) if info is None else _identity_and_times(info),
                        tuple(subdirectories),
                        tuple(protected.items()),
                    )
                    # Not remembered when racy, nor a root that is a link (listed each time).
                    if (
                        info is not None
                        and stat.S_ISDIR(info.st_mode)
                        and max(info.st_mtime_ns, info.st_ctime_ns) < settled_before
                    ):
                        kept[directory] = listing
                else:
                    kept[directory] = listing
                found.update(listing.protected)
                pending.extend(listing.subdirectories)
            self._listings = kept
            self.listed = listed
            return ProtectedEntries(found, complete=complete)


def _identity_and_times(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _identity(path: str) -> tuple[int, int, bool] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, stat.S_ISDIR(info.st_mode))


def _list_directory(
    directory: str, skipped: AbstractSet[str]
) -> tuple[list[str], dict[str, tuple[int, int, bool]]]:
    """The directory's subdirectories to search and its protected entries (``OSError``: none)."""
    subdirectories: list[str] = []
    protected: dict[str, tuple[int, int, bool]] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                if entry.name.lower() in PROTECTED_NAMES:
                    info = entry.stat(follow_symlinks=False)
                    protected[entry.path] = (
                        info.st_dev,
                        info.st_ino,
                        stat.S_ISDIR(info.st_mode),
                    )
                elif (
                    entry.is_dir(follow_symlinks=False)
                    and entry.path not in skipped
                    and entry.name not in UNSEARCHED_DIRECTORIES
                ):
                    subdirectories.append(entry.path)
            except OSError:
                continue
    return subdirectories, protected


def carved_paths(
    roots: Sequence[Path],
    protected: Sequence[Path],
    hidden: Sequence[Path],
    entries: Iterable[str],
) -> dict[str, str]:
    """Paths cut out of the grants: ``readonly`` (``entries``, protected) or ``hidden``.

    ``entries`` are the ``.git`` entries to keep read-only (``find_protected``; none for a
    command that cannot write the roots). Each is read-only, and so is the repository it
    points to (a link, or a file naming the real one) when that is in a root too (outside the
    roots nothing is writable anyway). Nothing makes a hidden path less hidden: a ``.git``
    that is a link to ``/etc/shadow`` protects the link, and the secret stays hidden.
    """
    carved: dict[str, str] = {}

    def inside_roots(path: str) -> bool:
        return any(path == str(root) or path.startswith(str(root) + os.sep) for root in roots)

    for entry in entries:
        git = Path(entry)
        carved[entry] = "readonly"
        targets = [os.path.realpath(git)]
        if git.is_file():
            pointed = _gitdir(git)
            if pointed is not None:
                targets.append(os.path.realpath(pointed))
        for target in targets:
            if inside_roots(target):
                carved[target] = "readonly"
    for path in protected:
        carved.setdefault(os.path.realpath(path), "readonly")
    for secret in (*SYSTEM_HIDDEN_PATHS, *(os.path.realpath(path) for path in hidden)):
        carved[secret] = "hidden"
    return carved


def _gitdir(pointer: Path) -> Path | None:
    try:
        text = pointer.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = Path(line.split(":", 1)[1].strip())
            return target if target.is_absolute() else pointer.parent / target
    return None


def command_environment(search_path: Sequence[str], home: str) -> dict[str, str]:
    """The whole environment of a confined command: no key or token of the host's."""
    environment = {
        "PATH": os.pathsep.join(search_path),
        "HOME": home,
        "TMPDIR": home,
        "TMP": home,
        "TEMP": home,
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_OPTIONAL_LOCKS": "0",
        "CORE_AGENT_SANDBOX": "1",
    }
    for name in PASSED_LOCALE:
        if name in os.environ:
            environment[name] = os.environ[name]
    environment.setdefault("LANG", "C.UTF-8")
    return environment


def command_policy(
    *,
    program: str,
    argv: Sequence[str],
    cwd: Path,
    environment: Mapping[str, str],
    roots: Sequence[Path],
    carved: Mapping[str, str],
    temporary: str,
    writable: bool,
    network: bool,
    namespaces: bool,
    search_path: Sequence[str],
    extra_read: Sequence[str] = (),
    limits: CommandLimits | None = None,
) -> dict[str, Any]:
    """The JSON policy the launcher applies (see ``confined_child``)."""
    roots_text = [str(root) for root in roots]
    # The resolver's files are often links into /run (systemd-resolved, NetworkManager):
    # their targets must be readable too, or a command allowed the network cannot find hosts.
    resolver = [os.path.realpath(path) for path in RESOLVER_FILES] if network else []
    system = _unique([*SYSTEM_READ_PATHS, *python_paths(), *search_path, *extra_read, *resolver])
    read = _unique([*system, *roots_text])
    write = [temporary, *(roots_text if writable else ())]
    return {
        "program": program,
        "argv": list(argv),
        "env": dict(environment),
        "cwd": str(cwd),
        "read": read,
        "system_read": [path for path in read if path in system],
        "write": _unique(write),
        "devices": list(DEVICES),
        "carved": dict(carved),
        "network": network,
        "writable": writable,
        "namespaces": namespaces,
        "private_shm": namespaces and writable,
        "seccomp": True,
        "limits": asdict(limits or CommandLimits()),
    }


def _unique(paths: Sequence[str]) -> list[str]:
    """The paths in order, without repeats or paths already below another one (one rule each)."""
    kept: list[str] = []
    for path in paths:
        if not path or path in kept:
            continue
        if any(path.startswith(other.rstrip("/") + "/") for other in paths if other != path):
            continue
        kept.append(path)
    return kept
