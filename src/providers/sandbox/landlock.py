"""Landlock, the Linux security module that lets an unprivileged process confine itself.

Three system calls through ``ctypes`` (no maintained Python binding covers network rules and
scopes): a ruleset names the access rights it *handles*; rules grant some of them beneath a
file or directory (or on a TCP port); ``restrict_self`` applies the ruleset to the calling
thread and everything it starts, for good. What is handled and not granted is denied, by the
kernel, whatever the program does. Standard library only: the launcher process imports it.

ABI versions add rights: 2 ``REFER`` (rename/link across directories), 3 ``TRUNCATE``,
4 TCP bind/connect, 5 device ``ioctl``, 6 scopes (signals and abstract Unix sockets stay
inside the sandbox). Rights the running kernel does not know are left out of both the
handled and the granted sets, so a ruleset is always valid; ``abi_version`` tells callers
what they got.
"""

from __future__ import annotations

import ctypes
import os
import stat

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on every arch
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13
TRUNCATE = 1 << 14
IOCTL_DEV = 1 << 15

NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_FS_BY_ABI = {
    1: (1 << 13) - 1,
    2: (1 << 14) - 1,
    3: (1 << 15) - 1,
    4: (1 << 15) - 1,
    5: (1 << 16) - 1,
}
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The only rights a rule on a non-directory may carry."""
READ_RIGHTS = READ_FILE | READ_DIR | EXECUTE
"""Read and run (system programs, libraries, the workspace when it is read-only)."""
WRITE_RIGHTS = (1 << 16) - 1
"""Everything beneath: create, remove, rename, truncate, run."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


class LandlockError(OSError):
    """A Landlock call failed; ``errno`` says why."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPortAttr(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def _check(result: int, what: str) -> int:
    if result == -1:
        code = ctypes.get_errno()
        raise LandlockError(code, f"{what}: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The Landlock ABI of the running kernel; 0 when Landlock is missing or disabled."""
    result = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(result), 0)


def fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows."""
    return _FS_BY_ABI.get(abi, _FS_BY_ABI[5]) if abi > 0 else 0


class Ruleset:
    """One Landlock ruleset: handled rights, then rules, then ``restrict_self``.

    Args:
        abi: The kernel's ABI (``abi_version()``); rights it does not know are dropped.
        network: Handle TCP bind and connect (ABI 4+), so only granted ports are reachable.
        scoped: Keep signals and abstract Unix sockets inside the sandbox (ABI 6+).
        fs: Handle the filesystem rights (off for a ruleset that only scopes, ABI 6+).
    """

    def __init__(self, abi: int, *, network: bool, scoped: bool, fs: bool = True) -> None:
        if abi < 1:
            raise LandlockError(95, "Landlock is not available in this kernel")
        self.abi = abi
        self.fs_mask = fs_rights(abi) if fs else 0
        attr = _RulesetAttr(self.fs_mask, 0, 0)
        size = 8
        if abi >= 4:
            size = 16
            attr.handled_access_net = (NET_BIND_TCP | NET_CONNECT_TCP) if network else 0
        if abi >= 6:
            size = 24
            attr.scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if scoped else 0
        self.handles_network = bool(attr.handled_access_net)
        self.scoped = bool(attr.scoped)
        self._fd = _check(
            _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
            "landlock_create_ruleset",
        )

    def allow_fd(self, fd: int, rights: int) -> None:
        """Grant ``rights`` beneath the file or directory open as ``fd`` (an ``O_PATH`` fd).

        Directory-only rights are dropped for a non-directory.
        """
        rights &= self.fs_mask
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
        if not rights:
            return
        attr = _PathBeneathAttr(rights, fd)
        _check(
            _libc.syscall(_SYS_ADD_RULE, self._fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            "landlock_add_rule",
        )

    def allow_prepared(self, fd: int, rights: int) -> None:
        """Like ``allow_fd`` for rights already fit to the descriptor's kind (no ``fstat``)."""
        rights &= self.fs_mask
        if not rights:
            return
        attr = _PathBeneathAttr(rights, fd)
        _check(
            _libc.syscall(_SYS_ADD_RULE, self._fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            "landlock_add_rule",
        )

    def allow_path(self, path: str, rights: int) -> bool:
        """Grant ``rights`` beneath ``path``; ``False`` (nothing granted) when it is missing."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            self.allow_fd(fd, rights)
        finally:
            os.close(fd)
        return True

    def allow_port(self, port: int, rights: int) -> None:
        """Grant TCP ``rights`` (``NET_BIND_TCP``, ``NET_CONNECT_TCP``) on one port."""
        attr = _NetPortAttr(rights, port)
        _check(
            _libc.syscall(_SYS_ADD_RULE, self._fd, _RULE_NET_PORT, ctypes.byref(attr), 0),
            "landlock_add_rule",
        )

    def restrict_self(self) -> None:
        """Confine the calling thread and its future children (sets ``no_new_privs``)."""
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_libc.syscall(_SYS_RESTRICT_SELF, self._fd, 0), "landlock_restrict_self")

    def close(self) -> None:
        """Release the ruleset's descriptor (a restricted thread keeps its confinement)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
