"""Where commands find their programs: the system path, never the workspace.

The search path is the kernel's own ``PATH`` with every entry that is relative, missing, or
inside a workspace root or the data directory removed, and the directory of the kernel's own
Python first (so ``python`` and the tools installed with the kernel are the kernel's). A
program named in a command is resolved on that path before it is judged; a command that names
a program by path (``./cat``, ``bin/cat``, ``/tmp/x``) is a path the model chose, which no
allowlist entry covers.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path


def _inside(path: Path, parents: Iterable[Path]) -> bool:
    return any(path == parent or path.is_relative_to(parent) for parent in parents)


def system_search_path(
    environ_path: str | None, excluded: Sequence[Path], *, interpreter: str | None = None
) -> tuple[str, ...]:
    """The directories commands search for programs, in order.

    Args:
        environ_path: The host's ``PATH`` (``os.defpath`` when unset).
        excluded: Directories no entry may be in (workspace roots, the data directory).
        interpreter: The kernel's Python, whose directory goes first unless excluded.
    """
    resolved_excluded = [Path(os.path.realpath(p)) for p in excluded]
    entries: list[str] = []
    candidates = (environ_path if environ_path is not None else os.defpath).split(os.pathsep)
    if interpreter:
        candidates.insert(0, os.path.dirname(interpreter))
    for entry in candidates:
        if not entry or not os.path.isabs(entry):
            continue
        real = Path(os.path.realpath(entry))
        if not real.is_dir() or _inside(real, resolved_excluded) or str(real) in entries:
            continue
        if _inside(Path(os.path.normpath(entry)), resolved_excluded):
            continue
        entries.append(str(real))
    return tuple(entries)


def default_search_path(excluded: Sequence[Path]) -> tuple[str, ...]:
    """``system_search_path`` for this process: its ``PATH`` and its interpreter."""
    return system_search_path(os.environ.get("PATH"), excluded, interpreter=sys.executable)


def resolve_program(name: str, search_path: Sequence[str]) -> str | None:
    """The absolute path ``name`` runs from, or ``None``; names with a ``/`` are not looked up."""
    if not name or "/" in name or name in (".", ".."):
        return None
    found = shutil.which(name, path=os.pathsep.join(search_path))
    return os.path.abspath(found) if found else None
