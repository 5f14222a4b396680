"""Git commands that print tracked files' contents, and the screen they pass before running.

``git diff``, ``git show`` and ``git log -p`` print what the repository holds: the index and
every commit, not only the work tree a walk's screen (``walk_screen``) can hide files from.
A committed ``.env`` stays in the history after it is deleted. So before such a command
runs, the paths the repository has ever tracked (its history on every ref, and its index)
below the paths the command limits itself to are screened through the call's permit
(``CallPermit.withheld``); when one is withheld the command is refused with the files named,
and the model can ask again for the paths it needs (``git log -p -- src``).

The paths are listed by git itself (``git log --all --name-only``, ``git ls-files``), run by
the kernel with the repository's hooks and file-system monitor off, and kept per repository
until one of its refs, its index or its HEAD changes.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core_agent.contracts.tool import Capability, WithheldFile
from providers.sandbox.paths import PathGuard

MAX_HISTORY_PATHS = 200_000
LISTING_TIMEOUT_S = 20.0
_SAFE_GIT = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "log.showSignature=false",
    "--no-pager",
)
"""Nothing the repository configures runs: no hooks, no file-system monitor, no signature
program (``gpg.program`` with ``log.showSignature``), no pager."""

_PATCH_OPTIONS = frozenset(
    {
        "-p",
        "-u",
        "--patch",
        "--patch-with-stat",
        "--patch-with-raw",
        "-c",
        "--cc",
        "--dd",
        "-m",
        "--full-diff",
        "--binary",
        "--text",
        "-a",
        "--pickaxe-all",
        "--pickaxe-regex",
    }
)
_PATCH_PREFIXES = (
    "-U",
    "--unified",
    "-L",
    "-S",
    "-G",
    "--word-diff",
    "--color-words",
    "--find-object",
    "--diff-merges",
    "--patch",
)
_NAMES_ONLY = frozenset(
    {
        "--stat",
        "--numstat",
        "--shortstat",
        "--name-only",
        "--name-status",
        "--summary",
        "--dirstat",
        "--quiet",
        "--raw",
        "-s",
        "--no-patch",
    }
)


def shown_history(
    subcommand: str, args: Sequence[str], exists: Callable[[str], bool]
) -> tuple[str, ...] | None:
    """The paths a git command may print the tracked contents of, or ``None`` for none.

    ``()`` means every path of the repository. ``git log`` prints contents only with a patch
    or a pickaxe option (``-p``, ``-L``, ``-S``...: a pickaxe tells whether a text was ever
    in a file); ``git diff`` unless it prints names and counts only; ``git show`` unless
    every operand names a blob (``REV:path``, judged as that path). The paths are the
    operands after ``--`` and, before it, the operands that are paths in the work tree
    (``exists``), as git reads them; anything it cannot read (pathspec magic) means every
    path.
    """
    if subcommand not in ("diff", "show", "log", "whatchanged"):
        return None
    before, after = list(args), None
    if "--" in args:
        cut = list(args).index("--")
        before, after = list(args[:cut]), list(args[cut + 1 :])
    options = [word for word in before if word.startswith("-") and word != "-"]
    operands = [word for word in before if not word.startswith("-") or word == "-"]
    patch = any(_shows_patch(option) for option in options)
    if subcommand in ("log", "whatchanged") and not patch:
        return None
    if subcommand in ("diff", "show") and set(options) & _NAMES_ONLY and not patch:
        return None
    if subcommand == "show" and operands and after is None and all(":" in o for o in operands):
        return None
    limits = [o for o in operands if ":" not in o and exists(o)] + (after or [])
    if any(limit.startswith(":") for limit in limits):
        return ()  # pathspec magic (``:(exclude)``, ``:!``): read as every path
    return tuple(limits)


def _shows_patch(option: str) -> bool:
    name = option.split("=", 1)[0]
    if name in _PATCH_OPTIONS or option.startswith(_PATCH_PREFIXES):
        return True
    # Bundled short options (``-pn``): any letter that makes a patch or a pickaxe.
    return not option.startswith("--") and any(letter in option[1:] for letter in "puLSGcma")


@dataclass(frozen=True, slots=True)
class _Listing:
    signature: tuple[object, ...]
    top: str
    paths: frozenset[str]


class HistoryPaths:
    """The paths each repository has tracked, listed by git and kept until it changes."""

    def __init__(self) -> None:
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()

    def screen(
        self,
        guard: PathGuard,
        directory: str,
        limits: Sequence[str],
        withheld: Callable[[str], WithheldFile | None],
        command: str,
    ) -> str | None:
        """Why ``command`` may not run: the tracked files below ``limits`` it may not read.

        ``directory`` is where git runs; ``None`` when nothing is withheld (or it is no
        repository: the command will say so itself). Blocking.
        """
        listing = self._listing(directory)
        if isinstance(listing, str):
            return listing
        if listing is None:
            return None
        here = os.path.relpath(os.path.realpath(directory), listing.top)
        prefixes = [os.path.normpath(os.path.join(here, limit)) for limit in limits]
        if not prefixes or any(p == "." or p.startswith("..") for p in prefixes):
            prefixes = [""]  # the whole repository (or more than it)
        asking: list[str] = []
        denied = 0
        for path in sorted(listing.paths):
            if not any(not p or path == p or path.startswith(f"{p}/") for p in prefixes):
                continue
            absolute = os.path.join(listing.top, path)
            verdict = guard.check(absolute, Capability.READ)
            shown = verdict.path if verdict.allowed and verdict.path is not None else absolute
            why = withheld(shown)
            if why is None:
                continue
            if why.denied:
                denied += 1
            else:
                asking.append(shown)
        if not asking and not denied:
            return None
        named = ", ".join(asking[:5]) + (" and others" if len(asking) > 5 else "")
        held = "; ".join(
            part for part in (named, f"{denied} a policy rule denies" if denied else "") if part
        )
        return (
            f"{command} may print what the repository holds of files the policy keeps from "
            f"this command ({held}): its history and index keep them whatever the work tree "
            "holds. Name the paths to show after -- (for example: git log -p -- src)"
        )

    def _listing(self, directory: str) -> _Listing | str | None:
        top = _git(directory, "rev-parse", "--show-toplevel")
        if top is None:
            return None
        top = os.path.realpath(top.strip("\n"))
        git_dir = _git(top, "rev-parse", "--absolute-git-dir")
        if git_dir is None:
            return None
        signature = _signature(git_dir.strip("\n"))
        with self._lock:
            kept = self._listings.get(top)
            if kept is not None and kept.signature == signature:
                return kept
        history = _git(top, "log", "--all", "--format=", "--name-only", "-z")
        index = _git(top, "ls-files", "-z")
        if history is None or index is None:
            return "the repository's history could not be listed to screen it"
        paths = frozenset(p for p in (*history.split("\0"), *index.split("\0")) if p)
        if len(paths) > MAX_HISTORY_PATHS:
            return (
                f"the repository has tracked more than {MAX_HISTORY_PATHS} paths, too many to "
                "screen against the policy; name the paths to show after --"
            )
        listing = _Listing(signature, top, paths)
        with self._lock:
            self._listings[top] = listing
        return listing


def _git(directory: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *_SAFE_GIT, "-C", directory, *args],
            capture_output=True,
            timeout=LISTING_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "surrogateescape")


def _signature(git_dir: str) -> tuple[object, ...]:
    """What changes when a ref, the index or HEAD does (mtimes and sizes, refs walked)."""
    parts: list[object] = []
    for name in ("HEAD", "index", "packed-refs"):
        try:
            info = os.stat(os.path.join(git_dir, name))
        except OSError:
            parts.append(None)
            continue
        parts.append((name, info.st_mtime_ns, info.st_size, info.st_ino))
    for folder, _, files in os.walk(os.path.join(git_dir, "refs")):
        for name in files:
            try:
                info = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            parts.append((folder, name, info.st_mtime_ns, info.st_size))
    return tuple(parts)
