"""Files an agent file names (its prompt, policy, script): regular files beside it, capped.

An agent file is often someone else's, and what it names is sent to a model or becomes
policy, so a name may not reach outside the file's own folder: ``../../etc/hostname``,
``/proc/self/environ`` and a link to ``~/.ssh/id_rsa`` are all refused, links resolved first.
Only a regular file is read (a FIFO or a device could block or never end), and at most
``limit`` bytes of it are read whatever its size claims (``/proc`` files say 0).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


class UnusableFileError(Exception):
    """Why a named file cannot be used, in words that follow the key's name."""


@dataclass(frozen=True, slots=True)
class ReferencedFile:
    """A file read for an agent file: where it really is, and its text."""

    path: Path
    """The file, links resolved."""
    text: str


def read_beside(folder: Path, name: str, limit: int) -> ReferencedFile:
    """The UTF-8 text of the file ``name`` in ``folder`` (a resolved path) or below it.

    Raises:
        UnusableFileError: No such file, outside ``folder`` once resolved, not a regular file,
            larger than ``limit`` bytes, unreadable, or not UTF-8 text.
    """
    named = folder / Path(name).expanduser()
    try:
        path = named.resolve(strict=True)
    except (OSError, RuntimeError, ValueError) as exc:  # missing, a loop of links, a NUL
        raise UnusableFileError(f"no such file: {name}") from exc
    if not path.is_relative_to(folder):
        raise UnusableFileError(
            f"{name} is outside the agent file's folder ({folder}): an agent file may only "
            "name files in its own folder or below"
        )
    try:
        # Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UnusableFileError(f"cannot read {name}: {exc.strerror}") from exc
    with open(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise UnusableFileError(f"{name} is not a regular file")
        try:
            data = stream.read(limit + 1)
        except OSError as exc:
            raise UnusableFileError(f"cannot read {name}: {exc.strerror}") from exc
    if len(data) > limit:
        raise UnusableFileError(f"{name} is larger than {limit:,} bytes")
    try:
        return ReferencedFile(path, data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnusableFileError(f"{name} is not UTF-8 text (line {line})") from exc
