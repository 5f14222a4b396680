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
from pathlib import Path

from core_agent.contracts.tool import Capability, WithheldFile
from core_agent.contracts.walked_files import withheld_note
from providers.sandbox.paths import PathGuard

MAX_SCREENED_FILES = 100_000
MAX_HIDDEN_FILES = 1_000


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

    Blocking: run it in a worker thread. A file in a root is screened by its workspace path
    (``SandboxVerdict.path``), one a link leads to outside the roots by its absolute path
    (the confinement may let the command read it: an extra read path, ``/opt``); the
    kernel's data and the kernel-made file systems (``/proc``, ``/sys``, ``/dev``) are not
    searched. A file with several names (a hard link) is withheld under all of them.
    """
    search = _Search(paths, withheld, max_files, max_hidden)
    try:
        for walk in walks:
            search.directory(os.path.realpath(walk))
    except _Refused as refused:
        return WalkScreen(refusal=_too_many(walks, str(refused)))
    return search.outcome()


class _Refused(Exception):
    """The walk cannot be screened (the text says why)."""


class _Search:
    """One screen's walk: what it visited, screened and withheld so far."""

    def __init__(
        self,
        paths: PathGuard,
        withheld: Callable[[str], WithheldFile | None],
        max_files: int,
        max_hidden: int,
    ) -> None:
        self.paths = paths
        self.withheld = withheld
        self.max_files = max_files
        self.max_hidden = max_hidden
        self.visited: set[tuple[int, int]] = set()
        self.screened = 0
        self.kept_out: dict[str, tuple[str, WithheldFile]] = {}
        """Real path: (the path shown, why), for each file withheld."""
        self.linked: dict[tuple[int, int], list[tuple[str, str]]] = {}
        """Files with more than one name, by identity: (real path, path shown) of each."""
        self.withheld_ids: dict[tuple[int, int], WithheldFile] = {}

    def directory(self, start: str) -> None:
        """Screen every file below ``start`` (a real path), following links."""
        pending = [start]
        while pending:
            directory = pending.pop()
            shown = self._shown(directory)
            if shown is None:
                continue
            try:
                info = os.stat(directory)
                if (info.st_dev, info.st_ino) in self.visited:
                    continue
                self.visited.add((info.st_dev, info.st_ino))
                with os.scandir(directory) as entries:
                    found = list(entries)
            except OSError:
                continue
            for entry in found:
                try:
                    if entry.is_symlink():
                        # Followed (grep -R, rg -L): the place it leads is screened as that
                        # place, whatever the link is called.
                        target = os.path.realpath(entry.path)
                        if os.path.isdir(target):
                            pending.append(target)
                        elif os.path.isfile(target):
                            target_shown = self._shown(target)
                            if target_shown is not None:
                                self.file(target, target_shown, os.stat(target))
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    else:
                        info = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode):
                            name = posixpath.normpath(posixpath.join(shown, entry.name))
                            self.file(entry.path, name, info)
                except OSError:
                    continue

    def _shown(self, real: str) -> str | None:
        """How ``real`` is named to the policy, or ``None`` when it is not searched."""
        verdict = self.paths.check(real, Capability.READ)
        if verdict.allowed and verdict.path is not None:
            return verdict.path
        if self.paths.root_of(Path(real)) is not None or _kernel_made(real):
            return None  # the kernel's data, or not files anyone wrote
        if any(real == str(h) or real.startswith(f"{h}/") for h in self.paths.hidden):
            return None
        return real

    def file(self, real: str, shown: str, info: os.stat_result) -> None:
        """Screen one regular file, ``shown`` to the policy; ``info`` is its ``lstat``."""
        self.screened += 1
        if self.screened > self.max_files:
            raise _Refused(f"more than {self.max_files} files")
        identity = (info.st_dev, info.st_ino)
        if info.st_nlink > 1:
            self.linked.setdefault(identity, []).append((real, shown))
        if real in self.kept_out:
            return
        why = self.withheld(shown)
        if why is not None:
            self._withhold(real, shown, why)
            self.withheld_ids[identity] = why

    def _withhold(self, real: str, shown: str, why: WithheldFile) -> None:
        try:
            real.encode("utf-8")
        except UnicodeEncodeError:
            name = real.encode("utf-8", "surrogateescape")
            raise _Refused(f"a file the policy keeps from it named {name!r}, not UTF-8") from None
        self.kept_out[real] = (shown, why)
        if len(self.kept_out) > self.max_hidden:
            raise _Refused(f"more than {self.max_hidden} files the policy keeps from it")

    def outcome(self) -> WalkScreen:
        """What the walk found, once every name of a withheld file is withheld too."""
        # A second name of a withheld file is withheld as it is (a hard link to .env).
        for identity, why in self.withheld_ids.items():
            for real, shown in self.linked.get(identity, ()):
                if real not in self.kept_out:
                    self._withhold(real, shown, why)
        asking = tuple(shown for shown, why in self.kept_out.values() if not why.denied)
        denied = sum(1 for _, why in self.kept_out.values() if why.denied)
        return WalkScreen(tuple(self.kept_out), asking, denied)


def _kernel_made(path: str) -> bool:
    return any(path == top or path.startswith(f"{top}/") for top in ("/proc", "/sys", "/dev"))


def _too_many(walks: Sequence[str], what: str) -> str:
    where = ", ".join(repr(walk) for walk in walks[:3])
    return (
        f"the command reads every file below {where}, which holds {what}: each file is "
        "screened against the policy before such a command runs. Search a narrower directory "
        "or name the files"
    )
