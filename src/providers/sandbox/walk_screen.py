"""The files a walking command (``grep -r``) may not read, found before it starts.

A command that reads every file below a directory is graded by that directory. The files
below it that the call's permit withholds (``CallPermit.withheld``: a policy rule denies
them, or reading them needs a human the walk was not approved for) are hidden from the
command by its confinement, as the walking tools skip them (``contracts/walked_files.py``):
``grep -r KEY .`` in a workspace holding ``.env`` reads everything but ``.env``.

The search follows links (``grep -R`` and ``rg -L`` do) and screens each file by its real
path, so a link cannot lead a walk to a file it would not be given by name. It is bounded:
a walk over more files than ``MAX_SCREENED_FILES``, or past more withheld files than
``MAX_HIDDEN_FILES`` (each is a mount or a split of the grants), is refused with the reason.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core_agent.contracts.tool import Capability, WithheldFile
from core_agent.contracts.walked_files import withheld_note
from providers.sandbox.paths import PathGuard

MAX_SCREENED_FILES = 100_000
MAX_HIDDEN_FILES = 256


@dataclass(frozen=True, slots=True)
class WalkScreen:
    """What one command's walks come across that it may not read."""

    hidden: tuple[str, ...] = ()
    """Real paths of the withheld files, to hide from the command."""
    asking: tuple[str, ...] = ()
    """Workspace paths of those that a human could hand over (named so the model can ask)."""
    denied: int = 0
    """How many of them a rule denies (counted, not named)."""
    refusal: str | None = None
    """Why the walks cannot be screened (too many files), or ``None``."""

    @property
    def note(self) -> str:
        """What the command's result tells the model about the files left out ("" for none)."""
        return withheld_note(self.asking, self.denied)


def screen_walks(
    paths: PathGuard,
    walks: Sequence[str],
    withheld: Callable[[str], WithheldFile | None],
    *,
    max_files: int = MAX_SCREENED_FILES,
    max_hidden: int = MAX_HIDDEN_FILES,
) -> WalkScreen:
    """Screen every file below ``walks`` (``CommandAssessment.walks``) through ``withheld``.

    Blocking: run it in a worker thread. Directories outside the roots or in the kernel's
    data are not searched (the confinement keeps them from the command anyway).
    """
    hidden: list[str] = []
    asking: list[str] = []
    denied = 0
    screened = 0
    visited: set[tuple[int, int]] = set()
    pending: list[str] = [str(paths.resolve(walk)) for walk in walks]
    while pending:
        directory = pending.pop()
        verdict = paths.check(directory, Capability.READ)
        if not verdict.allowed or verdict.path is None:
            continue
        try:
            info = os.stat(directory)
            if (info.st_dev, info.st_ino) in visited:
                continue
            visited.add((info.st_dev, info.st_ino))
            with os.scandir(directory) as entries:
                found = list(entries)
        except OSError:
            continue
        shown = verdict.path
        for entry in found:
            try:
                if entry.is_symlink():
                    # Screened where it leads: the file or directory it names is reached
                    # there with its own workspace path (a link out of the roots is not).
                    target = os.path.realpath(entry.path)
                    if os.path.isdir(target):
                        pending.append(target)
                        continue
                    target_shown = paths.check(target, Capability.READ).path
                    if target_shown is None or not os.path.isfile(target):
                        continue
                    real, workspace_path = target, target_shown
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                elif stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                    real = entry.path
                    workspace_path = posixpath.normpath(posixpath.join(shown, entry.name))
                else:
                    continue
            except OSError:
                continue
            screened += 1
            if screened > max_files:
                return WalkScreen(refusal=_too_many(walks, f"more than {max_files} files"))
            kept_out = withheld(workspace_path)
            if kept_out is None or real in hidden:
                continue
            hidden.append(real)
            if len(hidden) > max_hidden:
                kept = f"more than {max_hidden} files the policy keeps from it"
                return WalkScreen(refusal=_too_many(walks, kept))
            if kept_out.denied:
                denied += 1
            else:
                asking.append(workspace_path)
    return WalkScreen(tuple(hidden), tuple(asking), denied)


def _too_many(walks: Sequence[str], what: str) -> str:
    where = ", ".join(repr(walk) for walk in walks[:3])
    return (
        f"the command reads every file below {where}, which holds {what}: each file is "
        "screened against the policy before such a command runs. Search a narrower directory "
        "or name the files"
    )
