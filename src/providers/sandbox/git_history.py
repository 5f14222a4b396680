"""Git commands that print tracked files' contents, and the screen they pass before running.

``git diff``, ``git show`` and ``git log -p`` print what the repository holds: the index and
every commit, not only the work tree a walk's screen (``walk_screen``) can hide files from.
A committed ``.env`` stays in the history after it is deleted. So before such a command
runs, what it may read is screened through the call's permit (``CallPermit.withheld``):
for ``git log`` and ``git show``, every path the repository has held (every ref, the
reflogs, the pseudo-refs such as ``ORIG_HEAD``, merges' own changes, the index); for ``git
diff`` and ``git status -v``, the index and the trees of the commits they compare, as git
itself resolves their operands (``rev-parse --revs-only``); below the paths the command
limits itself to. When a file is withheld the command is refused with the files named, and
the model can ask again for the paths it needs (``git log -p -- src``). What a command may
print is judged from lists of what is known harmless, never of what is known to print
contents: git has too many ways to print them.

The paths are listed by git itself (``git log --all --reflog -m --name-only``, ``git
ls-files``, ``git ls-tree``), run by the kernel with nothing the repository configures
running, and kept per repository until one of its refs, reflogs, its index or its HEAD
changes (a tree's, for good).
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core_agent.contracts.tool import WithheldFile
from core_agent.contracts.tool_sandbox import GitContentRead
from providers.sandbox.paths import PathGuard

MAX_HISTORY_PATHS = 200_000
_PSEUDO_REFS = (
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "AUTO_MERGE",
)
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

_NAMES_ONLY = frozenset(
    {
        "--stat",
        "--shortstat",
        "--numstat",
        "--name-only",
        "--name-status",
        "--summary",
        "--dirstat",
        "--compact-summary",
        "--quiet",
        "-s",
        "--no-patch",
    }
)
"""Options that print names and counts instead of contents (of a commit)."""
_METADATA_OPTIONS = frozenset(
    {
        "--oneline",
        "--graph",
        "--decorate",
        "--no-decorate",
        "-n",
        "--max-count",
        "--skip",
        "--since",
        "--until",
        "--after",
        "--before",
        "--author",
        "--committer",
        "--grep",
        "--all-match",
        "--invert-grep",
        "-i",
        "--regexp-ignore-case",
        "-E",
        "-F",
        "--extended-regexp",
        "--fixed-strings",
        "--format",
        "--pretty",
        "--abbrev-commit",
        "--no-abbrev-commit",
        "--abbrev",
        "--date",
        "--relative-date",
        "--reverse",
        "--first-parent",
        "--merges",
        "--no-merges",
        "--all",
        "--branches",
        "--tags",
        "--remotes",
        "--date-order",
        "--author-date-order",
        "--topo-order",
        "--ancestry-path",
        "--left-right",
        "--boundary",
        "--parents",
        "--children",
        "--no-color",
        "--color",
        "-z",
        "--no-walk",
        "--source",
        "--use-mailmap",
        "--no-ext-diff",
        "--no-textconv",
        "--exit-code",
        *_NAMES_ONLY,
    }
)
"""Options of ``git log``, ``show`` and ``diff`` that print no file's contents (names, counts,
messages, dates); any other option may (``-p``, ``-L``, ``-S``, ``--check``, ``--follow``,
``--submodule=diff``, ``--remerge-diff``...), so the list is of what is known harmless."""
_LIMITING_GLOBALS = frozenset({"--glob-pathspecs", "--icase-pathspecs", "--noglob-pathspecs"})
_MAY_BE_AN_OBJECT_ID = re.compile(r"[0-9a-fA-F]{4,}")


def shown_history(
    subcommand: str, args: Sequence[str], global_args: Sequence[str] = ()
) -> tuple[str, ...] | None:
    """The paths a git command may print the tracked contents of, or ``None`` for none.

    ``()`` means every path the repository ever held. Options are judged by a list of those
    known to print no contents (``_METADATA_OPTIONS``): ``git log`` with only those prints
    none; ``git diff`` prints none only with one that prints names instead (``--stat``);
    ``git show`` prints an object named by id or tag whatever its options (``git show
    REV:path`` is screened as the object it names: ``compared_revisions``); ``git status``
    prints contents with ``-v`` however spelled. The paths a command limits itself to count only
    when given literally after ``--`` (no glob characters, no magic, no global pathspec
    options), with no revision that may name an object by its id or a file (``REV:path``):
    git ignores paths for a file's object. Anything else may reach every path.
    """
    if subcommand == "status":
        # -v, bundled (-bv) or a long prefix (--verb): the staged and unstaged diffs.
        verbose = any(
            (word[:1] == "-" and word[1:2] != "-" and "v" in word[1:])
            or (len(word) >= 3 and "--verbose".startswith(word.split("=", 1)[0]))
            for word in args
            if word != "--"
        )
        return () if verbose else None
    if subcommand not in ("diff", "show", "log", "whatchanged"):
        return None
    before, after = list(args), None
    if "--" in args:
        cut = list(args).index("--")
        before, after = list(args[:cut]), list(args[cut + 1 :])
    if subcommand == "diff" and "--no-index" in before:
        return None  # two paths compared as files, no repository read (walked if folders)
    options = [word for word in before if word.startswith("-") and word != "-"]
    operands = [word for word in before if not word.startswith("-") or word == "-"]
    names = [option.split("=", 1)[0] for option in options]
    harmless = _harmless(names)
    if harmless and subcommand == "log":
        return None
    # Not git show: it prints a file's object whatever the options (--stat ID).
    if harmless and subcommand == "diff" and set(names) & _NAMES_ONLY:
        return None
    literal = (
        after
        and not set(global_args) & _LIMITING_GLOBALS
        and not any(set(limit) & set("*?[]\\") or limit.startswith(":") for limit in after)
        and not any(_MAY_BE_AN_OBJECT_ID.match(operand) for operand in operands)
        # REV:path is one file, whose object git prints whatever paths follow.
        and not any(":" in operand for operand in operands)
        and not any(name in ("--follow", "--full-diff", "-L") for name in names)
    )
    return tuple(after or ()) if literal else ()


def compared_revisions(subcommand: str, args: Sequence[str]) -> tuple[str, ...] | None:
    """The operands whose objects a git command reads besides the index and work tree.

    ``git diff`` reads the index, the work tree and the revisions among its operands (the
    sandbox reads each as git does, ``rev-parse --revs-only``: a path yields none), ``HEAD``
    too with ``--cached``; ``git status -v`` reads ``HEAD``; ``git show REV:path ...`` the
    objects it names (a file's is judged by its path). ``None`` for a command that may
    reach any commit (``git log``, any other ``git show``), or a diff with an option that
    may compare something else (``--merge-base``...).
    """
    if subcommand == "status":
        return ("HEAD",)
    if subcommand == "show":
        # Files shown by REV:path, each judged by its path once the sandbox sees it is a
        # file's object (:/message or REV:folder is not); commits shown by name and count
        # only (--stat), once it sees each is a commit.
        operands = list(args)
        if operands and all(":" in o and not o.startswith("-") for o in operands):
            return tuple(operands)
        if names_only_show(args):
            return tuple(o for o in operands if not o.startswith("-")) or ("HEAD",)
        return None
    if subcommand != "diff":
        return None
    before = list(args[: list(args).index("--")]) if "--" in args else list(args)
    options = [word for word in before if word.startswith("-") and word != "-"]
    if not all(_compares_the_same(option) for option in options):
        return None
    revisions = [word for word in before if not word.startswith("-") or word == "-"]
    if {"--cached", "--staged"} & {option.split("=", 1)[0] for option in options}:
        revisions.append("HEAD")
    return tuple(revisions)


def names_only_show(args: Sequence[str]) -> bool:
    """Whether ``git show ARGS`` prints only names and counts of the commits it shows.

    Only harmless options (``_METADATA_OPTIONS``), one of which prints names instead of
    patches (``--stat``), and no ``--``: for a commit. Another object (a file's, a tag's)
    is printed whole whatever the options: the sandbox checks each operand is a commit.
    """
    if "--" in args:
        return False
    names = [word.split("=", 1)[0] for word in args if word.startswith("-") and word != "-"]
    return _harmless(names) and bool(set(names) & _NAMES_ONLY)


def _harmless(names: Sequence[str]) -> bool:
    """Whether every option named is known to print no contents (``-5`` counts commits)."""
    return all(
        name in _METADATA_OPTIONS or (name[1:].isdigit() and name[:1] == "-") for name in names
    )


def _compares_the_same(option: str) -> bool:
    if option.startswith("--"):
        return option.split("=", 1)[0] in _COMPARING_SAME
    for letter in option[1:]:  # bundled; -U3 and -M50% end with their value
        if f"-{letter}" not in _COMPARING_SAME:
            return False
        if letter in "UM":
            return True
    return True


_COMPARING_SAME = frozenset(
    {
        "--cached",
        "--staged",
        "-p",
        "-u",
        "--patch",
        "-w",
        "-b",
        "--ignore-all-space",
        "--ignore-space-change",
        "--ignore-blank-lines",
        "-R",
        "--color",
        "--no-color",
        "--word-diff",
        "--color-words",
        "--unified",
        "-U",
        "--minimal",
        "--patience",
        "--histogram",
        "--no-renames",
        "-M",
        "--find-renames",
        "--relative",
        "--no-relative",
        "--text",
        "-a",
        "--check",
        "--exit-code",
        "--quiet",
        *_METADATA_OPTIONS,
    }
)
"""``git diff`` options that change how two sides are shown, never which sides are read
(``-U3`` and ``--unified=3`` are matched by name)."""


@dataclass(frozen=True, slots=True)
class _Repository:
    """Where a git command's repository lies, and what its refs and index look like now."""

    top: str
    git_dir: str
    signature: tuple[object, ...]


class HistoryPaths:
    """The paths each repository has held, listed by git and kept until it changes.

    Three listings, each kept: the whole history (every ref, reflog, pseudo-ref, merge) and
    the index, until a ref, a reflog, the index or HEAD changes; a tree's paths for good (a
    tree never changes: it is kept by its id).
    """

    def __init__(self) -> None:
        self._histories: dict[str, tuple[tuple[object, ...], frozenset[str]]] = {}
        self._indexes: dict[str, tuple[tuple[object, ...], frozenset[str]]] = {}
        self._trees: dict[tuple[str, str], frozenset[str]] = {}
        self._lock = threading.Lock()

    def screen(
        self,
        guard: PathGuard,
        read: GitContentRead,
        withheld: Callable[[str], WithheldFile | None],
        command: str,
    ) -> str | None:
        """Why ``command`` may not run: the files it may print that ``withheld`` keeps back.

        ``None`` when nothing is withheld (or there is no repository: the command will say
        so itself). Blocking.
        """
        repository = self._repository(read.directory)
        if repository is None or isinstance(repository, str):
            return repository
        paths = self._paths(repository, read)
        if isinstance(paths, str):
            return paths
        here = os.path.relpath(os.path.realpath(read.directory), repository.top)
        prefixes = [os.path.normpath(os.path.join(here, limit)) for limit in read.limits]
        if not prefixes or any(p == "." or p.startswith("..") for p in prefixes):
            prefixes = [""]  # the whole repository (or more than it)
        # A path the repository holds is named to the policy as the work tree would name it,
        # spelled from the repository's top (no links to follow in a commit): relative to
        # its root, or absolute outside the roots (a repository above the workspace).
        roots = [str(root) for root in guard.roots]
        asking: list[str] = []
        denied = 0
        for path in sorted(paths):
            if not any(not p or path == p or path.startswith(f"{p}/") for p in prefixes):
                continue
            absolute = posixpath.normpath(posixpath.join(repository.top, path))
            shown = next(
                (absolute[len(root) + 1 :] for root in roots if absolute.startswith(f"{root}/")),
                absolute,
            )
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
        reach = "its history and index keep" if read.revisions is None else "what it compares holds"
        return (
            f"{command} may print what the repository holds of files the policy keeps from "
            f"this command ({held}): {reach} them whatever the work tree holds. Name the "
            "paths to show after -- (for example: git log -p -- src), or see names only "
            "(--stat)"
        )

    def _repository(self, directory: str) -> _Repository | str | None:
        dirs = _git(
            directory,
            "rev-parse",
            "--absolute-git-dir",
            "--path-format=absolute",
            "--git-common-dir",
        )
        if dirs is None:
            return None  # no repository here: git will say so itself
        # (Asked apart: in a bare repository it fails, and the two above would not print.)
        top = _git(directory, "rev-parse", "--show-toplevel")
        if top is None or not top.strip("\n"):
            # Inside a .git, or a bare repository: git finds the history, nothing to screen
            # it against a work tree by.
            return "git runs here without a work tree (inside .git or a bare repository)"
        git_dir, _, common = dirs.strip("\n").partition("\n")
        signature = _signature(git_dir, common or git_dir)
        return _Repository(os.path.realpath(top.strip("\n")), git_dir, signature)

    def _paths(self, repository: _Repository, read: GitContentRead) -> frozenset[str] | str:
        """What of the repository ``read`` may print, or why it cannot be listed."""
        if read.revisions is None:
            return self._history(repository)
        if read.commits_named_only:
            # Names and counts of commits: nothing of a file is printed, if each is one.
            for operand in read.revisions:
                if operand.startswith("-") or _object_type(read.directory, operand) != "commit":
                    return self._history(repository)
            return frozenset()
        paths = self._index(repository) if read.index else frozenset()
        if isinstance(paths, str):
            return paths
        for operand in read.revisions:
            if ":" in operand:
                # REV:path, :/message, :N:path... One file's object is judged by its path;
                # a tree (REV:folder) or a commit found by its message may hold anything.
                # (Asked by id: a suffix such as ^{tree} would be read as part of the message.)
                if _object_type(read.directory, operand) != "blob":
                    return self._history(repository)
                continue
            # The commits git reads for it, as git reads it (A..B, A...B with its merge base,
            # X^!, X^@), even when a file is named like it; nothing for a path.
            listed = (
                _git(read.directory, "rev-parse", "--revs-only", operand)
                if not operand.startswith("-")
                else None
            )
            if listed is None:
                return self._history(repository)
            for revision in listed.split():
                tree = self._tree(repository, read.directory, revision.lstrip("^"))
                if isinstance(tree, str):
                    return tree
                paths = paths | tree
        return paths

    def _history(self, repository: _Repository) -> frozenset[str] | str:
        top = repository.top
        with self._lock:
            kept = self._histories.get(top)
        if kept is not None and kept[0] == repository.signature:
            return kept[1]
        # Every ref and what the reflogs and the pseudo-refs still reach (a commit reset away
        # stays in ORIG_HEAD and the reflog), merges' own changes too (-m).
        pseudo = [n for n in _PSEUDO_REFS if os.path.exists(os.path.join(repository.git_dir, n))]
        listed = _git(
            top, "log", "--all", "--reflog", "-m", "--format=", "--name-only", "-z", *pseudo, "--"
        )
        index = self._index(repository)
        if listed is None or isinstance(index, str):
            return "the repository's history could not be listed to screen it"
        paths = frozenset(p for p in listed.split("\0") if p) | index
        if len(paths) > MAX_HISTORY_PATHS:
            return (
                f"the repository has held more than {MAX_HISTORY_PATHS} paths, too many to "
                "screen against the policy; name the paths to show after --"
            )
        with self._lock:
            self._histories[top] = (repository.signature, paths)
        return paths

    def _index(self, repository: _Repository) -> frozenset[str] | str:
        top = repository.top
        with self._lock:
            kept = self._indexes.get(top)
        if kept is not None and kept[0] == repository.signature:
            return kept[1]
        listed = _git(top, "ls-files", "-z", "--stage")
        if listed is None:
            return "the repository's index could not be listed to screen it"
        # Every stage of a conflicted file: "mode id stage<TAB>path".
        paths = frozenset(e.split("\t", 1)[-1] for e in listed.split("\0") if e)
        with self._lock:
            self._indexes[top] = (repository.signature, paths)
        return paths

    def _tree(self, repository: _Repository, directory: str, revision: str) -> frozenset[str] | str:
        """The paths of the tree of ``revision`` (an object id), or why not.

        A text when it names an object that is no commit or tree (a file's, whose contents
        cannot be told apart by path) or nothing git knows.
        """
        tree = _git(
            directory, "rev-parse", "--verify", "-q", "--end-of-options", f"{revision}^{{tree}}"
        )
        if tree is None:
            return f"{revision!r} names an object that is not a commit or a tree"
        key = (repository.top, tree.strip())
        with self._lock:
            kept = self._trees.get(key)
        if kept is not None:
            return kept
        listed = _git(repository.top, "ls-tree", "-r", "--name-only", "-z", tree.strip())
        if listed is None:
            return f"the tree of {revision!r} could not be listed to screen it"
        paths = frozenset(p for p in listed.split("\0") if p)
        with self._lock:
            self._trees[key] = paths
        return paths


def _object_type(directory: str, revision: str) -> str | None:
    """The type of the one object git resolves ``revision`` to, or ``None``."""
    found = _git(directory, "rev-parse", "--verify", "-q", "--end-of-options", revision)
    if found is None:
        return None
    kind = _git(directory, "cat-file", "-t", found.strip())
    return kind.strip() if kind else None


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


def _signature(git_dir: str, common_dir: str) -> tuple[object, ...]:
    """What changes when a ref, a reflog, the index or HEAD does (mtimes, sizes; refs walked).

    A linked worktree keeps its HEAD and index in ``git_dir`` and shares the refs of
    ``common_dir``; the reftable format keeps them all in ``reftable/``.
    """
    parts: list[object] = []
    for folder, name in (
        *((git_dir, n) for n in ("HEAD", "index", "logs/HEAD", *_PSEUDO_REFS)),
        (common_dir, "packed-refs"),
    ):
        try:
            info = os.stat(os.path.join(folder, name))
        except OSError:
            parts.append(None)
            continue
        parts.append((folder, name, info.st_mtime_ns, info.st_size, info.st_ino))
    for tree in ("refs", "reftable", "logs/refs"):
        for folder, _, files in os.walk(os.path.join(common_dir, tree)):
            for name in files:
                try:
                    info = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                parts.append((folder, name, info.st_mtime_ns, info.st_size, info.st_ino))
    return tuple(parts)
