"""What the default allowed programs' options do: which write files or run other programs.

A command runs without approval only when every option it uses is known not to write, execute
or read files the judge cannot see (named inside another file: ``sort --files0-from``). Options
are matched the way GNU getopt and git's parse-options read them: short options bundled
(``-rno/out`` is ``-r -n -o /out``), values attached or separate, long options abbreviated to
any unique prefix (``--out`` is ``--output``), so an unsafe option is found under every
spelling. Option values and operands that name files are checked against the workspace.

Programs added to ``AGENT_SANDBOX_ALLOWED_COMMANDS`` without a profile here are trusted as
configured: their options are not judged, and they may write inside the workspace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

ValueKind = Literal["text", "read", "ranged_read", "list", "optional", "unsafe"]
"""``text``/``read``: the option takes a value (attached, or the next word); ``read`` names a
file, ``ranged_read`` one after the value's last ``:`` (``git log -L 1,9:file``). ``list``: it
names a file that lists more files to read (``sort --files0-from``), which the judge cannot
see. ``optional``: a value only when attached (``--color[=WHEN]``, ``-U3``), so the next
word stays an operand. ``unsafe``: the option writes files or runs programs."""
OperandKind = Literal["read", "text", "pattern_then_read", "revisions_or_paths", "date"]


@dataclass(frozen=True, slots=True)
class ProgramProfile:
    """How one program (or git subcommand) reads its arguments, and which ones are unsafe."""

    unsafe_short: str = ""
    """Short options that write files or run programs."""
    unsafe_long: frozenset[str] = frozenset()
    """Long options (without ``--``) that write files or run programs."""
    short_values: Mapping[str, ValueKind] = field(default_factory=dict)
    long_values: Mapping[str, ValueKind] = field(default_factory=dict)
    operands: OperandKind = "read"
    max_operands: int | None = None
    """More operands than this write (``uniq IN OUT``)."""
    numeric_options: bool = False
    """``-5`` is an option (``head -5``), not an operand."""
    unsafe_operands_without: frozenset[str] = frozenset()
    """Operands are unsafe unless one of these options is given (``git branch NAME`` creates a
    branch; ``git branch --list PATTERN`` only lists)."""
    walk_options: frozenset[str] = frozenset()
    """Options that make the program read every file below its directory operands, or below
    the current directory when it names no file (``grep -r``). ``NAME=VALUE`` stands for an
    option with that value (``--directories=recurse``); a long name or a value may be given
    abbreviated, as getopt allows."""
    walks_always: bool = False
    """The program reads every file below its directory operands whatever its options, and
    below the current directory when it names no file (``rg``)."""


@dataclass(frozen=True, slots=True)
class OptionVerdict:
    """What a program's arguments do, as far as its profile tells."""

    unsafe: tuple[str, ...] = ()
    """Why the arguments are not proven harmless (a write, a program run, unseen reads)."""
    reads: tuple[str, ...] = ()
    """Option values and operands that name files to read."""
    walks: bool = False
    """The program reads every file below the directories among ``reads`` (``grep -r``); the
    current directory is among them when it names no file."""


READ_ONLY = ProgramProfile()

GIT_GLOBAL = ProgramProfile(
    unsafe_short="c",
    unsafe_long=frozenset({"exec-path", "config-env", "upload-pack", "receive-pack"}),
    short_values={"C": "read", "c": "unsafe"},
    long_values={
        "git-dir": "read",
        "work-tree": "read",
        "namespace": "text",
        "super-prefix": "text",
        "list-cmds": "text",
        "attr-source": "text",
    },
)

_HISTORY = ProgramProfile(
    # --output writes the patch to a file; --ext-diff runs the configured external diff.
    unsafe_long=frozenset({"output", "ext-diff"}),
    short_values={
        "n": "text",
        "U": "optional",  # -U<n>: git takes a value only attached
        "S": "text",
        "G": "text",
        "O": "read",
        "L": "ranged_read",
    },
    long_values={
        "format": "text",
        "pretty": "optional",
        "max-count": "text",
        "since": "text",
        "until": "text",
        "after": "text",
        "before": "text",
        "author": "text",
        "committer": "text",
        "grep": "text",
        "skip": "text",
        "diff-filter": "text",
        "word-diff-regex": "text",
        "relative": "optional",
        "src-prefix": "text",
        "dst-prefix": "text",
        "line-prefix": "text",
        "output-indicator-new": "text",
        "output-indicator-old": "text",
        "output-indicator-context": "text",
        "anchored": "text",
        "color-moved": "optional",
        "date": "text",
        "decorate": "optional",
        "encoding": "text",
        "abbrev": "optional",
        "stat": "optional",
        "dirstat": "optional",
        "submodule": "optional",
        "ignore-submodules": "optional",
        "color": "optional",
        "word-diff": "optional",
    },
    operands="revisions_or_paths",
)

GIT_SUBCOMMANDS: dict[str, ProgramProfile] = {
    "status": ProgramProfile(
        short_values={"u": "optional"},  # -u<mode>, attached only
        long_values={"untracked-files": "optional", "ignored": "optional", "column": "optional"},
        operands="read",
    ),
    "diff": _HISTORY,
    "log": _HISTORY,
    "show": _HISTORY,
    "rev-parse": ProgramProfile(
        long_values={"git-path": "text", "short": "optional", "abbrev-ref": "optional"},
        # ``git rev-parse HEAD:.env`` names the object holding .env (``git show ID`` prints it).
        operands="revisions_or_paths",
    ),
    "branch": ProgramProfile(
        unsafe_short="dDmMcCuft",
        unsafe_long=frozenset(
            {
                "delete",
                "move",
                "copy",
                "force",
                "set-upstream-to",
                "unset-upstream",
                "edit-description",
                "track",
                "no-track",
                "create-reflog",
                "recurse-submodules",
                "set-upstream",
            }
        ),
        long_values={
            "contains": "text",
            "no-contains": "text",
            "merged": "text",
            "no-merged": "text",
            "points-at": "text",
            "format": "text",
            "sort": "text",
            "column": "optional",
            "abbrev": "optional",
            "color": "optional",
        },
        operands="text",
        unsafe_operands_without=frozenset({"--list", "-l"}),
    ),
}

PROFILES: dict[str, ProgramProfile] = {
    "ls": ProgramProfile(
        short_values={"I": "text", "w": "text", "T": "text"},
        long_values={
            "hide": "text",
            "ignore": "text",
            "width": "text",
            "tabsize": "text",
            "format": "text",
            "sort": "text",
            "time": "text",
            "time-style": "text",
            "block-size": "text",
            "quoting-style": "text",
            "indicator-style": "text",
        },
    ),
    "cat": READ_ONLY,
    "head": ProgramProfile(
        short_values={"n": "text", "c": "text"},
        long_values={"lines": "text", "bytes": "text"},
        numeric_options=True,
    ),
    "tail": ProgramProfile(
        short_values={"n": "text", "c": "text", "s": "text"},
        long_values={"lines": "text", "bytes": "text", "pid": "text", "sleep-interval": "text"},
        numeric_options=True,
    ),
    "wc": ProgramProfile(long_values={"files0-from": "list"}),
    "grep": ProgramProfile(
        short_values={
            "e": "text",
            "f": "read",
            "m": "text",
            "A": "text",
            "B": "text",
            "C": "text",
            "d": "text",
            "D": "text",
        },
        long_values={
            "regexp": "text",
            "file": "read",
            "max-count": "text",
            "after-context": "text",
            "before-context": "text",
            "context": "text",
            "include": "text",
            "exclude": "text",
            "exclude-from": "read",
            "exclude-dir": "text",
            "label": "text",
            "color": "optional",
            "colour": "optional",
            "binary-files": "text",
            "devices": "text",
            "directories": "text",
            "group-separator": "text",
        },
        operands="pattern_then_read",
        numeric_options=True,
        walk_options=frozenset(
            {
                "-r",
                "-R",
                "--recursive",
                "--dereference-recursive",
                "-d=recurse",
                "--directories=recurse",
            }
        ),
    ),
    "rg": ProgramProfile(
        # --pre and --hostname-bin run programs; -z runs decompressors.
        unsafe_short="z",
        unsafe_long=frozenset({"pre", "pre-glob", "hostname-bin", "search-zip"}),
        short_values={
            "e": "text",
            "f": "read",
            "g": "text",
            "t": "text",
            "T": "text",
            "m": "text",
            "A": "text",
            "B": "text",
            "C": "text",
            "j": "text",
            "M": "text",
            "r": "text",
            "E": "text",
        },
        long_values={
            "regexp": "text",
            "file": "read",
            "glob": "text",
            "iglob": "text",
            "type": "text",
            "type-not": "text",
            "type-add": "text",
            "max-count": "text",
            "replace": "text",
            "ignore-file": "read",
            "max-depth": "text",
            "max-filesize": "text",
            "sort": "text",
            "sortr": "text",
            "colors": "text",
            "color": "text",
            "encoding": "text",
            "threads": "text",
            "context": "text",
            "before-context": "text",
            "after-context": "text",
        },
        operands="pattern_then_read",
        walks_always=True,
    ),
    "sort": ProgramProfile(
        # -o writes a file, -T writes temporary files in a directory, and
        # --compress-program runs a program.
        unsafe_short="oT",
        unsafe_long=frozenset({"output", "temporary-directory", "compress-program"}),
        short_values={"k": "text", "t": "text", "S": "text"},
        long_values={
            "key": "text",
            "field-separator": "text",
            "buffer-size": "text",
            "parallel": "text",
            "sort": "text",
            "batch-size": "text",
            "files0-from": "list",
            "random-source": "read",
        },
    ),
    "uniq": ProgramProfile(
        short_values={"f": "text", "s": "text", "w": "text"},
        long_values={
            "skip-fields": "text",
            "skip-chars": "text",
            "check-chars": "text",
            "all-repeated": "optional",
            "group": "optional",
        },
        max_operands=1,
    ),
    "cut": ProgramProfile(
        short_values={"d": "text", "f": "text", "b": "text", "c": "text"},
        long_values={
            "delimiter": "text",
            "fields": "text",
            "bytes": "text",
            "characters": "text",
            "output-delimiter": "text",
        },
    ),
    "diff": ProgramProfile(
        short_values={
            "D": "text",
            "I": "text",
            "x": "text",
            "X": "read",
            "F": "text",
            "L": "text",
            "U": "text",
            "C": "text",
            "W": "text",
            "S": "text",
        },
        long_values={
            "from-file": "read",
            "to-file": "read",
            "exclude-from": "read",
            "exclude": "text",
            "ignore-matching-lines": "text",
            "label": "text",
            "ifdef": "text",
            "unified": "optional",
            "context": "optional",
            "width": "text",
            "starting-file": "text",
            "color": "optional",
            "palette": "text",
            "line-format": "text",
            "old-line-format": "text",
            "new-line-format": "text",
            "unchanged-line-format": "text",
            "old-group-format": "text",
            "new-group-format": "text",
            "changed-group-format": "text",
            "unchanged-group-format": "text",
            "tabsize": "text",
            "horizon-lines": "text",
        },
        # Two directories are compared file by file (every level with -r): read whole.
        walks_always=True,
    ),
    "echo": ProgramProfile(operands="text"),
    "pwd": ProgramProfile(operands="text", max_operands=0),
    "date": ProgramProfile(
        # -s/--set (and an operand that is not +FORMAT) set the system clock.
        unsafe_short="s",
        unsafe_long=frozenset({"set"}),
        short_values={"d": "text", "f": "read", "r": "read"},
        long_values={
            "date": "text",
            "file": "read",
            "reference": "read",
            "iso-8601": "optional",
            "rfc-3339": "text",
        },
        operands="date",
    ),
    "stat": ProgramProfile(
        short_values={"c": "text"},
        long_values={"format": "text", "printf": "text", "cached": "text"},
    ),
    "file": ProgramProfile(
        # -C compiles a magic file into the current directory; -z/-Z run decompressors.
        unsafe_short="CzZ",
        unsafe_long=frozenset({"compile", "uncompress", "uncompress-noreport"}),
        short_values={"m": "read", "f": "list", "F": "text", "e": "text", "P": "text"},
        long_values={
            "magic-file": "read",
            "files-from": "list",
            "separator": "text",
            "exclude": "text",
            "exclude-quiet": "text",
            "parameter": "text",
        },
    ),
    "du": ProgramProfile(
        short_values={"X": "read", "B": "text", "d": "text", "t": "text"},
        long_values={
            "exclude-from": "read",
            "files0-from": "list",
            "exclude": "text",
            "block-size": "text",
            "max-depth": "text",
            "threshold": "text",
            "time": "optional",
            "time-style": "text",
        },
    ),
    "tree": ProgramProfile(
        # -o writes the listing to a file; -R writes 00Tree.html files (with -H).
        unsafe_short="oR",
        short_values={"L": "text", "P": "text", "I": "text", "H": "text", "T": "text"},
        long_values={
            "charset": "text",
            "filelimit": "text",
            "timefmt": "text",
            "sort": "text",
            "gitfile": "read",
            "infofile": "read",
            "hintro": "read",
            "houtro": "read",
        },
    ),
    "which": ProgramProfile(operands="text"),
    "true": ProgramProfile(operands="text"),
    "false": ProgramProfile(operands="text"),
}


def judge_options(
    profile: ProgramProfile, args: Sequence[str], *, program: str
) -> tuple[OptionVerdict, int]:
    """The verdict on ``args`` (the words after the program), and how many were operands."""
    unsafe: list[str] = []
    reads: list[str] = []
    operands: list[str] = []
    given: set[str] = set()
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--":
            operands.extend(args[index:])
            break
        if word.startswith("--") and len(word) > 2:
            name, has_value, value = word[2:].partition("=")
            given.add(f"--{name}")
            match = _long_match(profile, name)
            if match is None:
                continue
            if match in profile.unsafe_long or profile.long_values.get(match) == "unsafe":
                unsafe.append(f"{program} --{match} writes files or runs programs")
                continue
            kind = profile.long_values.get(match)
            if kind is None or (kind == "optional" and not has_value):
                continue
            if not has_value and index < len(args):
                value, index = args[index], index + 1
            given.add(f"--{match}={value}")
            if kind in ("read", "list"):
                reads.append(value)
            elif kind == "ranged_read":
                reads.append(value.rsplit(":", 1)[-1] if ":" in value else "")
            if kind == "list":
                unsafe.append(_UNSEEN_READS.format(program=program, option=f"--{match}"))
            continue
        if word.startswith("-") and len(word) > 1:
            if profile.numeric_options and word[1:].isdigit():
                continue
            for position, letter in enumerate(word[1:], start=1):
                given.add(f"-{letter}")
                if letter in profile.unsafe_short:
                    unsafe.append(f"{program} -{letter} writes files or runs programs")
                    break
                kind = profile.short_values.get(letter)
                if kind is None:
                    continue
                value = word[position + 1 :]
                if not value and kind != "optional" and index < len(args):
                    value, index = args[index], index + 1
                given.add(f"-{letter}={value}")
                if kind in ("read", "list"):
                    reads.append(value)
                elif kind == "ranged_read":
                    reads.append(value.rsplit(":", 1)[-1] if ":" in value else "")
                if kind == "list":
                    unsafe.append(_UNSEEN_READS.format(program=program, option=f"-{letter}"))
                break
            continue
        operands.append(word)
    if profile.max_operands is not None and len(operands) > profile.max_operands:
        unsafe.append(f"{program}: operand {operands[profile.max_operands]!r} is an output file")
    if profile.unsafe_operands_without and operands and not given & profile.unsafe_operands_without:
        unsafe.append(f"{program} {operands[0]!r} changes the repository")
    named = _operand_reads(profile, operands, given, program, unsafe)
    walks = profile.walks_always or _walk_option_given(profile.walk_options, given)
    if walks and not named and profile.operands != "text":
        named = ["."]  # grep -r PATTERN, rg PATTERN: the current directory
    reads.extend(named)
    return OptionVerdict(tuple(unsafe), tuple(reads), walks), len(operands)


def _walk_option_given(options: frozenset[str], given: set[str]) -> bool:
    """Whether one of ``options`` (``ProgramProfile.walk_options``) is among ``given``.

    Long names and values count when given abbreviated (``--recur``, ``-d rec``): getopt
    takes a unique prefix, and an ambiguous one fails the program, so counting it too only
    errs towards screening.
    """
    for option in options:
        if option in given:
            return True
        name, equals, value = option.partition("=")
        for word in given:
            word_name, word_equals, word_value = word.partition("=")
            if bool(equals) != bool(word_equals) or not word_name.startswith(name[:2]):
                continue
            if equals:
                if word_name == name and word_value and value.startswith(word_value):
                    return True
            elif name.startswith("--") and len(word_name) > 3 and name.startswith(word_name):
                return True
    return False


_UNSEEN_READS = (
    "{program} {option} reads the files named inside its file, which cannot be checked "
    "against the workspace"
)


def _long_match(profile: ProgramProfile, name: str) -> str | None:
    """What the option ``--name`` means.

    Exact, else an unsafe one it abbreviates, else a unique known one it abbreviates (GNU
    and git accept unique prefixes).
    """
    known = profile.unsafe_long | set(profile.long_values)
    if name in known:
        return name
    if not name:
        return None
    unsafe = sorted(u for u in profile.unsafe_long if u.startswith(name))
    if unsafe:
        return unsafe[0]
    candidates = [k for k in known if k.startswith(name)]
    return candidates[0] if len(candidates) == 1 else None


def _operand_reads(
    profile: ProgramProfile,
    operands: list[str],
    given: set[str],
    program: str,
    unsafe: list[str],
) -> list[str]:
    kind = profile.operands
    if kind == "text":
        return []
    if kind == "date":
        for operand in operands:
            if not operand.startswith("+"):
                unsafe.append(f"{program} {operand!r} sets the system clock")
        return []
    if kind == "pattern_then_read":
        pattern_given = given & {"-e", "--regexp", "-f", "--file"}
        return operands if pattern_given else operands[1:]
    if kind == "revisions_or_paths":
        # A revision and a file are not told apart by their spelling (``id_rsa``, ``private``
        # are files; ``main`` may be either), so every operand is judged as the file it may
        # be (a revision is a harmless name), and ``REV:path``, ``:path``, ``:N:path`` by the
        # file of the repository they show. Git splits at the first colon outside braces
        # (``HEAD@{tomorrow 00:00}:.env``, ``HEAD^{/:x}:.env``): what follows every colon is
        # judged, which covers however git splits it.
        reads: list[str] = []
        for operand in operands:
            if ":" in operand and "://" not in operand:
                reads.extend(
                    operand[index + 1 :] or "."
                    for index, character in enumerate(operand)
                    if character == ":"
                )
            else:
                reads.append(operand)
        return reads
    return operands


def looks_like_path(word: str) -> bool:
    """A word that names a file rather than a revision, pattern or URL."""
    if not word or "://" in word or word.startswith("-"):
        return False
    return word.startswith(("/", "~", ".")) or "/" in word
