"""Judging shell commands: which lines are provably allowed, which need a human.

A line runs without approval only when the parser can read every part of it statically and
every program in it is an allowed one: resolved on the system search path (never a file in
the workspace or a path the model wrote), matching an ``AGENT_SANDBOX_ALLOWED_COMMANDS``
prefix, using no option that writes files or runs programs (``program_profiles``), and naming
no file outside the workspace. Anything else (an expansion, a substitution, an assignment, a
function, an unknown program, an unsafe option, a path outside) is *unproven*: the policy then
asks a human. Output redirections must point at writable workspace paths; one that the
confinement would refuse anyway (outside the roots, into ``.git`` or the data directory) is
refused outright.

This is the explainer and grader. What holds when it is wrong is the operating system's
confinement of every command (``confinement``).
"""

from __future__ import annotations

import glob
import os
import posixpath
import shlex
from collections.abc import Sequence

from core_agent.contracts.shell_parser import IShellParser, ParsedCommand, SimpleCommand
from core_agent.contracts.tool import Capability
from core_agent.contracts.tool_sandbox import CommandAssessment, GitContentRead
from providers.sandbox.git_history import compared_revisions, names_only_show, shown_history
from providers.sandbox.paths import PathGuard
from providers.sandbox.program_paths import resolve_program
from providers.sandbox.program_profiles import (
    GIT_GLOBAL,
    GIT_SUBCOMMANDS,
    PROFILES,
    ProgramProfile,
    judge_options,
    looks_like_path,
)

_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_GLOB_CHARACTERS = "*?["


class CommandGuard:
    """Assesses command lines against the allowlist, the program profiles and the roots."""

    def __init__(
        self,
        parser: IShellParser,
        allowed: Sequence[str],
        paths: PathGuard,
        search_path: Sequence[str],
    ) -> None:
        self._parser = parser
        self._paths = paths
        self.search_path = tuple(search_path)
        self._prefixes: list[tuple[str, tuple[str, ...], str]] = []
        self.inactive: list[str] = []
        """Allowlist entries whose program is not on the search path (they allow nothing)."""
        for entry in allowed:
            words = shlex.split(entry) if entry.strip() else []
            if not words:
                continue
            program = resolve_program(words[0], self.search_path)
            if program is None:
                self.inactive.append(entry)
                continue
            self._prefixes.append((program, tuple(words[1:]), entry))
        self._shown = ", ".join(entry for _, _, entry in self._prefixes) or "none"

    def parse(self, command: str) -> ParsedCommand:
        """The parsed command line."""
        return self._parser.parse(command)

    def resolve(self, name: str) -> str | None:
        """Where ``name`` runs from on the commands' search path."""
        return resolve_program(name, self.search_path)

    def assess(self, command: str) -> CommandAssessment:
        """See ``CommandAssessment``."""
        if not command.strip():
            return CommandAssessment(refusal="the command is empty")
        if "\x00" in command:
            return CommandAssessment(refusal="the command contains a NUL byte")
        parsed = self._parser.parse(command)
        unproven = list(parsed.unproven)
        if parsed.error:
            unproven.append(f"the command cannot be parsed: {parsed.error}")
        if not parsed.commands and not unproven:
            return CommandAssessment(refusal="the command runs no program")
        writes = False
        named: list[str] = []  # what policy path rules will see, resolved
        walks: list[str] = []  # directories whose every file is read
        histories: list[GitContentRead] = []  # git commands printing contents
        for redirection in parsed.redirections:
            target = redirection.target
            if redirection.dynamic or target in _HARMLESS_TARGETS:
                continue
            if redirection.writes:
                verdict = self._paths.check(target, Capability.WRITE)
                if not verdict.allowed:
                    return CommandAssessment(refusal=f"output redirection: {verdict.reason}")
                writes = True
            else:
                verdict = self._paths.check(target, Capability.READ)
                if not verdict.allowed:
                    unproven.append(f"input redirection: {verdict.reason}")
            if verdict.path is not None:
                named.append(verdict.path)
        programs: list[str] = []
        for simple in parsed.commands:
            reasons, program, simple_writes = self._judge(simple, named, walks, histories)
            unproven.extend(reasons)
            writes = writes or simple_writes
            if program is not None and program not in programs:
                programs.append(program)
        return CommandAssessment(
            unproven=tuple(dict.fromkeys(unproven)),
            writes=writes,
            programs=tuple(programs),
            paths=tuple(dict.fromkeys(named)),
            walks=tuple(dict.fromkeys(walks)),
            histories=tuple(dict.fromkeys(histories)),
        )

    def _judge(
        self,
        simple: SimpleCommand,
        named: list[str],
        walks: list[str],
        histories: list[GitContentRead],
    ) -> tuple[list[str], str | None, bool]:
        """Reasons ``simple`` is not proven, the program it runs, and whether it writes.

        The workspace paths it names are added to ``named``, the directories whose every file
        it reads (``grep -r``) to ``walks``, a git command that may print tracked contents
        to ``histories`` (``CommandAssessment.histories``).
        """
        argv = simple.argv
        shown = " ".join(argv)[:120]
        name = argv[0]
        if any(mark in name for mark in ("$", "`", *_GLOB_CHARACTERS)):
            return [f"{shown!r}: the program is only known at run time"], None, False
        if "/" in name:
            return (
                [
                    f"{shown!r} runs {name} by path: only programs found on the system path can be "
                    "allowed"
                ],
                None,
                False,
            )
        reasons: list[str] = []
        if name in _DIRECTORY_CHANGES:
            # Every relative path after it (operands, redirections) would mean something else
            # than what was checked against the workspace root.
            return [f"{shown!r} changes the directory the other paths are checked in"], None, False
        program = self.resolve(name)
        if program is None:
            return [f"{name!r} is not a program on the system path"], None, False
        args = list(argv[1:])
        subcommand: str | None = None
        global_args: list[str] = []
        if os.path.basename(program) == "git":
            global_args, subcommand, args, unknown = _split_git(args)
            if unknown:
                reasons.append(f"{shown!r}: unknown git option {unknown!r} before the subcommand")
            verdict, _ = judge_options(GIT_GLOBAL, global_args, program="git")
            reasons.extend(verdict.unsafe)
            reasons.extend(self._outside(verdict.reads, "git", named))
        entry = self._match(program, [*([subcommand] if subcommand else []), *args])
        if entry is None:
            reasons.append(f"{shown!r} is not an allowed command (allowed: {self._shown})")
            return reasons, program, False
        profile = self._profile(program, subcommand, entry)
        if profile is None:
            # Allowed by configuration without a profile: trusted as configured, may write.
            paths = [word for word in args if looks_like_path(word)]
            reasons.extend(self._outside(paths, name, named))
            known = PROFILES.get(name) if name != "git" else None
            if known is not None:
                # A configured entry with words (``grep -n``) still walks as the program does.
                seen, _ = judge_options(known, args, program=name)
                if seen.walks:
                    reasons.extend(self._outside(seen.reads, name, named, walks=walks))
            return reasons, program, True
        verdict, _ = judge_options(profile, args, program=name)
        reasons.extend(verdict.unsafe)
        if subcommand is not None:
            reasons.extend(self._history(shown, global_args, subcommand, args, named, histories))
        # git diff compares two directories file by file with --no-index, or outside a
        # repository without it: its directory operands are walked like diff's.
        walked = walks if verdict.walks or subcommand == "diff" else None
        reasons.extend(self._outside(verdict.reads, name, named, walks=walked))
        for index in simple.globbed:
            reasons.extend(self._outside([_glob_base(argv[index])], name, named, tree=True))
            # The files the shell will put in its place, as they are now: each is read, and
            # each is what path rules must see (``cat .en?`` reads ``.env``).
            matches = self._expand(argv[index])
            if matches is None:
                reasons.append(
                    f"{shown!r}: {argv[index]!r} matches more than {_MAX_GLOB_MATCHES} files"
                )
            else:
                reasons.extend(self._outside(matches, name, named, walks=walked))
        return reasons, program, False

    def _history(
        self,
        shown: str,
        global_args: list[str],
        subcommand: str,
        args: list[str],
        named: list[str],
        histories: list[GitContentRead],
    ) -> list[str]:
        """Note a git command that may print tracked contents; why it cannot be screened."""
        limits = shown_history(subcommand, args, global_args)
        if limits is None:
            return []
        directory = self._paths.roots[0]
        for index, word in enumerate(global_args):
            if word == "-C" and index + 1 < len(global_args):
                directory = self._paths.resolve(directory / global_args[index + 1])
            elif word.split("=", 1)[0] in ("--git-dir", "--work-tree", "--namespace"):
                return [f"{shown!r}: {word} names a repository the screen does not follow"]
        if any(word.startswith("--submodule") for word in args):
            return [f"{shown!r}: it shows submodules' contents, which are not screened"]
        revisions = compared_revisions(subcommand, args)
        shows_names = subcommand == "show" and names_only_show(args)
        histories.append(
            GitContentRead(
                str(directory),
                limits,
                revisions,
                index=subcommand != "show",
                commits_named_only=shows_names,
            )
        )
        named.append("./")  # the whole repository is read: its screen comes with the permit
        return []

    def _expand(self, pattern: str) -> list[str] | None:
        """What the shell would expand ``pattern`` to in the first root (``None``: too much).

        Python's ``glob`` reads patterns as bash does by default: no ``**`` recursion, and
        a wildcard matches no leading dot unless the pattern spells the dot.
        """
        found: list[str] = []
        for match in glob.iglob(pattern, root_dir=self._paths.roots[0]):
            found.append(match)
            if len(found) > _MAX_GLOB_MATCHES:
                return None
        return found

    def _match(self, program: str, words: Sequence[str]) -> tuple[str, ...] | None:
        """The longest allowlist entry for ``program`` whose words start ``words``."""
        best: tuple[str, ...] | None = None
        for allowed_program, rest, _ in self._prefixes:
            if allowed_program != program or tuple(words[: len(rest)]) != rest:
                continue
            if best is None or len(rest) > len(best):
                best = rest
        return best

    @staticmethod
    def _profile(
        program: str, subcommand: str | None, entry: tuple[str, ...]
    ) -> ProgramProfile | None:
        name = os.path.basename(program)
        if name == "git":
            if subcommand is None or (entry and entry[0] != subcommand):
                return None
            return GIT_SUBCOMMANDS.get(subcommand)
        if entry:
            return None  # a configured sub-command prefix (``npm test``): as configured
        return PROFILES.get(name)

    def _outside(
        self,
        paths: Sequence[str],
        program: str,
        named: list[str],
        *,
        tree: bool = False,
        walks: list[str] | None = None,
    ) -> list[str]:
        """Why ``program`` may not read ``paths``; those it may are added to ``named``.

        With ``walks`` (the program reads every file below a directory it is given), the
        directories among them are added there too.
        """
        reasons = []
        for path in paths:
            if not path:
                continue
            verdict = self._paths.check(path, Capability.READ)
            if not verdict.allowed:
                reasons.append(f"{program} reads {path}: {verdict.reason}")
            elif verdict.path is not None:
                # A directory operand is read whole by the programs that take one (grep -r,
                # ls, du): rules on any path below it concern it.
                directory = os.path.isdir(self._paths.resolve(path))
                named.append(f"{verdict.path}/" if tree or directory else verdict.path)
                # And as spelled: a git operand (HEAD~1:.env) names a file of a commit, where
                # no link of the work tree leads (.env may be a link to README there).
                spelled = posixpath.normpath(path)
                if not spelled.startswith(("/", "~", "..")) and spelled != verdict.path:
                    named.append(spelled)
                if walks is not None and directory:
                    walks.append(str(self._paths.resolve(path)))
        return reasons


_DIRECTORY_CHANGES = frozenset({"cd", "pushd", "popd"})
_MAX_GLOB_MATCHES = 1_000
_GIT_FLAGS = frozenset(
    {
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--no-lazy-fetch",
        "--no-advice",
    }
)
_GIT_WITH_VALUE = frozenset(
    {
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--super-prefix",
        "--config-env",
        "--list-cmds",
        "--attr-source",
        "--exec-path",
    }
)


def _split_git(args: list[str]) -> tuple[list[str], str | None, list[str], str | None]:
    """Split a git command line into global options, subcommand, and its arguments.

    The fourth value is the first global option not known: then the subcommand cannot be told
    for certain.
    """
    index = 0
    while index < len(args):
        word = args[index]
        if not word.startswith("-") or word == "-":
            return args[:index], word, args[index + 1 :], None
        name = word.split("=", 1)[0]
        if word in _GIT_WITH_VALUE:
            index += 2
        elif word in _GIT_FLAGS or (name in _GIT_WITH_VALUE and "=" in word):
            index += 1
        else:
            return args[:index], None, args[index:], word
    return args, None, [], None


def _glob_base(word: str) -> str:
    """The directory a glob pattern lists: its literal part up to the last ``/`` before it."""
    cut = min((word.index(c) for c in _GLOB_CHARACTERS if c in word), default=len(word))
    literal = word[:cut]
    if "/" not in literal:
        return "."
    return literal.rsplit("/", 1)[0] or "/"
