"""Folders and files only this user may read, for everything the kernel keeps on disk.

The data directory holds every prompt, answer and tool result (the database, its WAL, the
vector and keyword indexes, the chat history), and the viewer's redirect file holds its
token. Made with the process's umask (022 on most systems) they would be readable by every
local user, so whatever writes there creates what is missing through these: folders 0700,
files 0600 (as the XDG base directory specification asks of a data directory). What exists
already keeps its mode: a folder the user made is theirs to set.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FOLDER_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` and each missing parent, readable by this user alone.

    A folder already there (or made meanwhile by another process) is left as it is.

    Raises:
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
