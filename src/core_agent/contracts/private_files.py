"""Folders and files only this user may read, for everything the kernel keeps on disk.

The data directory holds every prompt, answer and tool result (the database, its WAL, the
vector and keyword indexes, the chat history), and the viewer's redirect file holds its
token. Made with the process's umask (022 on most systems) they would be readable by every
local user, so whatever writes there creates what is missing through these: folders 0700,
files 0600 (as the XDG base directory specification asks of a data directory).

What is there already is judged before use, looked at without following a link (lstat, or
an ``O_NOFOLLOW`` descriptor whose own status is read, so what is judged is what is used):

- Refused (``ConfigurationError`` naming the path, what is wrong and how to fix it): one
  owned by another user, since its owner can read and swap whatever the kernel writes
  there (a folder another local user made first under ``/tmp`` or any shared folder); one
  that others may write to (world-writable, or group-writable for a group other than the
  user's private group, the group named as the user), since anything may have been put
  there (a sticky bit does not help: others can still create the database's ``-wal``
  before the kernel does); a link where a file should be, or a link to a folder that
  another user made.
- Tightened, with a warning: the user's own folder or file open to others. A folder keeps
  its group's read and search bits (a folder the user shared with a group on purpose) and
  loses the rest (others' bits, and a group write the umask 002 of user private groups left);
  a file loses every group and other bit (0600). So a data directory from before this check
  (0755, its database 0644) is the user's alone once a command opens it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from core_agent.contracts.errors import ConfigurationError

PRIVATE_FOLDER_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# A folder may keep its group's read and search bits; nothing else beyond its owner's.
_FOLDER_OPEN_BITS = stat.S_IWGRP | stat.S_IRWXO
_FILE_OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO

log = logging.getLogger(__name__)


def make_private_folder(folder: Path, *, what: str = "folder") -> None:
    """Create ``folder`` and each missing parent, readable by this user alone.

    A folder already there (or made meanwhile by another process) is judged as the module
    says: refused when another user owns it or others may write to it, else tightened
    (with a warning) if others may read it. ``what`` names it in messages.

    Raises:
        ConfigurationError: ``folder`` is another user's, others may write to it, or a link
            another user made.
        OSError: A folder cannot be created (a file is in the way, no permission...).
    """
    missing: list[Path] = []
    current = folder
    while not current.is_dir() and current.parent != current:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_FOLDER_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise
    secure_private_folder(folder, what=what)


def secure_private_folder(folder: Path, *, what: str = "folder") -> None:
    """Judge the existing ``folder`` as the module says: refuse it or make it private.

    Raises:
        ConfigurationError: Another user owns it (or the link to it), others may write to it.
        OSError: It does not exist, is not a folder, or cannot be read or changed.
    """
    if not hasattr(os, "geteuid"):
        return  # no owners and modes to judge (Windows: the profile's ACLs hold)
    link = os.lstat(folder)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.geteuid(), 0):
        raise ConfigurationError(
            f"{what} {folder} is a link made by {_who(link.st_uid)}, not by you: its owner can "
            "point it elsewhere at any time. Remove the link, or use a folder of your own"
        )
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    if not stat.S_ISLNK(link.st_mode):
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(folder, flags)
    try:
        _judge(fd, folder, what, _FOLDER_OPEN_BITS, "chmod go-w,o-rwx")
    finally:
        os.close(fd)


def secure_private_file(path: Path, *, what: str = "file") -> bool:
    """Judge the existing file ``path`` as the module says; False when there is none.

    Never through a link: a link at ``path`` is refused.

    Raises:
        ConfigurationError: It is a link or not a plain file, another user owns it, or others
            may write to it.
        OSError: It cannot be opened or its mode changed.
    """
    if not hasattr(os, "geteuid"):
        return path.exists()
    # O_NONBLOCK: a FIFO planted at the path must not block the open.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ConfigurationError(
            f"{what} {path} is a link: the kernel writes its data in a file of its own, never "
            "through a link another user could point anywhere. Remove the link"
        ) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigurationError(f"{what} {path} is not a plain file: remove it")
        _judge(fd, path, what, _FILE_OPEN_BITS, "chmod 600")
    finally:
        os.close(fd)
    return True


def _judge(fd: int, path: Path, what: str, open_bits: int, fix: str) -> None:
    status = os.fstat(fd)
    mode = stat.S_IMODE(status.st_mode)
    if status.st_uid != os.geteuid():
        raise ConfigurationError(
            f"{what} {path} belongs to {_who(status.st_uid)}, not to you, "
            f"{_who(os.geteuid())}: its owner could read and change what the kernel keeps "
            "there. Remove it (or have it handed to you with chown), or set AGENT_DATA_DIR "
            "to a folder of your own"
        )
    if mode & stat.S_IWOTH or (mode & stat.S_IWGRP and not _private_group(status.st_gid)):
        whom = "every local user" if mode & stat.S_IWOTH else f"group {status.st_gid}"
        raise ConfigurationError(
            f"{what} {path} may be written by {whom} (mode {mode:04o}): anything may have been "
            f"put there. If you trust what it holds, make it yours alone ({fix} {path}); "
            "otherwise remove it, or set AGENT_DATA_DIR to a folder of your own"
        )
    if mode & open_bits:
        tightened = mode & ~open_bits
        os.fchmod(fd, tightened)
        log.warning(
            "%s %s was open to other users (mode %04o): now %04o", what, path, mode, tightened
        )


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is the user's own group, named as the user (a user private group).

    Its write bit is what the umask 002 of such systems gives, not a share with others.
    """
    if gid != os.getegid():
        return False
    try:
        import grp
        import pwd

        return grp.getgrgid(gid).gr_name == pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return False


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def create_private_file(path: Path, content: bytes = b"") -> None:
    """Create ``path`` holding ``content``, readable by this user alone.

    Never through a link, never over what is there: the mode is set as the file comes into
    being, so no other user can open it in between.

    Raises:
        FileExistsError: Something is at ``path`` already (a file, a link, a folder).
        OSError: It cannot be created or written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
