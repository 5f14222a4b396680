"""A seccomp filter that takes sockets and a few kernel interfaces away from a sandbox.

Landlock confines files and TCP; it does not see UDP, raw sockets or connections to Unix
socket files (``/var/run/docker.sock``, a D-Bus or X11 socket: each one a way out of any
sandbox). This filter, installed right before ``execve``, refuses ``socket()`` for every
family when the call has no network, and for ``AF_UNIX`` when it has (``socketpair`` stays:
pipes between a program's own processes). It also refuses ``io_uring`` (which opens
connections without ``socket()``) and the kernel keyring calls (a user's keyring holds
credentials), and answers ``ENOSYS`` to syscalls newer than it knows. Landlock does not
cover changes of file metadata (mode, owner, extended
attributes, times) either: a command that may not write gets none of those calls, and one
that may write but whose protected paths are not behind read-only mounts gets no mode, owner
or attribute changes (else ``chmod 777 ~/.ssh/id_rsa`` would work). Syscalls of another ABI
than the native one (i386 or x32 on x86-64, where ``socketcall`` would sidestep the rules)
are refused outright.

Standard library only: the launcher process imports it. Supports x86-64 and aarch64;
``supported()`` says whether this machine is one of them.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import platform
import struct

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_AF_UNIX = 1
_X32_BIT = 0x40000000
_CLONE3 = 435  # the same on x86-64 and aarch64
_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE_PARENT = 0x00008000
_BPF_JSET_K = 0x45
_BPF_ALU_AND_K = 0x54
# Inode metadata also changes through ioctls, which need no writable descriptor: flags
# (chattr), generation numbers, XFS-style attributes, ext4's own. Every ioctl of the file
# system types 'f', 'v' and 'X' is refused where metadata changes are, but these readers.
_METADATA_IOCTL_TYPES = (0x6600, 0x7600, 0x5800)
_METADATA_READERS = (
    0x80086601,  # FS_IOC_GETFLAGS (lsattr)
    0x80046601,  # FS_IOC32_GETFLAGS
    0x80087601,  # FS_IOC_GETVERSION
    0x80047601,  # FS_IOC32_GETVERSION
    0xC020660B,  # FS_IOC_FIEMAP (cp, filefrag: where a file's data lies)
    0x801C581F,  # FS_IOC_FSGETXATTR
)
NEWEST_KNOWN = 462
"""``lsm_list_modules``, the newest syscall this filter was written against (the same number on
x86-64 and aarch64). Newer ones (``setxattrat``, ``file_setattr``...) get ``ENOSYS``, which
makes libc fall back to the calls the filter judges, instead of slipping past it."""

# (audit arch, socket, ioctl, io_uring_setup/enter/register, keyctl/add_key/request_key,
#  chmod/chown/xattr family, utime family)
_ARCHES = {
    "x86_64": (
        0xC000003E,
        41,
        16,
        (425, 426, 427),
        (250, 248, 249),
        (90, 91, 268, 452, 92, 93, 94, 260, 188, 189, 190, 197, 198, 199),
        (132, 235, 261, 280),
    ),
    "aarch64": (
        0xC00000B7,
        198,
        29,
        (425, 426, 427),
        (219, 217, 218),
        (52, 53, 452, 55, 54, 5, 6, 7, 14, 15, 16),
        (88,),
    ),
}

_libc = ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def supported() -> bool:
    """Whether a filter can be built for this machine's architecture."""
    return platform.machine() in _ARCHES


@functools.lru_cache(maxsize=8)
def build(*, network: bool, modes: bool = True, times: bool = True) -> bytes:
    """The filter program (``struct sock_filter[]``) for the native architecture.

    Cached: the launcher builds every variant once and its keepers inherit them.

    Args:
        network: The command may open network sockets (never ``AF_UNIX`` ones).
        modes: The command may change file modes, owners, extended attributes and inode
            flags and versions (``chattr``, file system ioctls).
        times: The command may change file times.

    Raises:
        OSError: The architecture is not supported.
    """
    machine = platform.machine()
    if machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine}")
    arch, socket_nr, ioctl_nr, io_uring, keyring, mode_calls, time_calls = _ARCHES[machine]
    denied = (
        *io_uring,
        *keyring,
        *(() if modes else mode_calls),
        *(() if times else time_calls),
    )
    program: list[tuple[int, int, int, int]] = []
    # Jump offsets are filled in once every label's position is known.
    labels: dict[str, int] = {}
    jumps: list[tuple[int, str | None, str | None]] = []

    def emit(code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        if jt or jf:
            jumps.append((len(program), jt, jf))
        program.append((code, 0, 0, k))

    emit(_BPF_LD_W_ABS, 4)  # seccomp_data.arch
    emit(_BPF_JEQ_K, arch, jf="deny")
    emit(_BPF_LD_W_ABS, 0)  # seccomp_data.nr
    if machine == "x86_64":
        emit(_BPF_JGE_K, _X32_BIT, jt="deny")
    emit(_BPF_JGE_K, NEWEST_KNOWN + 1, jt="unknown")
    # clone3 can start a child in any cgroup v2 it can name (CLONE_INTO_CGROUP, an O_PATH
    # descriptor Landlock does not check): out of its pids cgroup. ENOSYS: libc uses clone.
    emit(_BPF_JEQ_K, _CLONE3, jt="unknown")
    # CLONE_PARENT makes a sibling of the command, a child of its keeper: out of reach of the
    # namespace's reaper, and the namespace's end would wait for the keeper to reap it.
    emit(_BPF_JEQ_K, _CLONE[machine], jt="clone")
    for number in denied:
        emit(_BPF_JEQ_K, number, jt="deny")
    emit(_BPF_JEQ_K, socket_nr, jt="socket")
    if not modes:
        emit(_BPF_JEQ_K, ioctl_nr, jt="ioctl")
    emit(_BPF_RET_K, _RET_ALLOW)
    if not modes:
        labels["ioctl"] = len(program)
        emit(_BPF_LD_W_ABS, 24)  # low half of args[1], the request
        for request in _METADATA_READERS:
            emit(_BPF_JEQ_K, request, jt="allow")
        program.append((_BPF_ALU_AND_K, 0, 0, 0xFF00))  # the request's type byte
        for kind in _METADATA_IOCTL_TYPES:
            emit(_BPF_JEQ_K, kind, jt="deny")
        labels["allow"] = len(program)
        emit(_BPF_RET_K, _RET_ALLOW)
    labels["clone"] = len(program)
    emit(_BPF_LD_W_ABS, 16)  # low half of args[0], the flags
    emit(_BPF_JSET_K, _CLONE_PARENT, jt="deny")
    emit(_BPF_RET_K, _RET_ALLOW)
    labels["socket"] = len(program)
    if network:
        emit(_BPF_LD_W_ABS, 16)  # low half of args[0], the address family
        emit(_BPF_JEQ_K, _AF_UNIX, jt="deny")
        emit(_BPF_RET_K, _RET_ALLOW)
    labels["deny"] = len(program)
    emit(_BPF_RET_K, _RET_ERRNO | errno.EPERM)
    labels["unknown"] = len(program)
    emit(_BPF_RET_K, _RET_ERRNO | errno.ENOSYS)
    for index, jt, jf in jumps:
        code, _, _, k = program[index]
        true = labels[jt] - index - 1 if jt else 0
        false = labels[jf] - index - 1 if jf else 0
        program[index] = (code, true, false, k)
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def install(program: bytes) -> None:
    """Install ``program`` on the calling thread (``no_new_privs`` must be set).

    Raises:
        OSError: The kernel refused the filter.
    """
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"seccomp filter refused: {errno.errorcode.get(code, code)}")
