"""``IShellParser`` on tree-sitter's bash grammar: a real parser, not a regex.

Every ``command`` node in the syntax tree is a program that would run, wherever it sits: in a
pipeline, after ``&&``/``||``/``;``, in ``$(...)`` or backticks, in a subshell, in an
assignment (``X=$(...) ls``), a here-string, an arithmetic expansion or a subscript. Wrappers
that run another program (``bash -c '...'``, ``env``, ``exec``, ``xargs``, ``find -exec``,
``sudo``, ``timeout``, ``nice``, ``eval``...) are recorded *and* unwrapped, so both are judged.

The parser also lists what it cannot read statically (``unproven``): expansions of every kind
(variables, tilde, braces, ANSI-C and locale quoting, arithmetic), substitutions, assignments,
functions, control flow, here-documents that expand. It checks the raw text of unquoted words
for those characters itself rather than trusting the grammar's node kinds, because the grammar
and bash disagree in places (a backtick in a here-document body, brace expansion parsed as
plain words). Anything the grammar cannot parse is an error, never a guess.
"""

from __future__ import annotations

import itertools
import re
import shlex
import threading
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.shell_parser import (
    IShellParser,
    ParsedCommand,
    Redirection,
    SimpleCommand,
)

_LANGUAGE = Language(tree_sitter_bash.language())
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox", "fish", "mksh", "rbash"})
# Programs that run their arguments as another program.
_TRANSPARENT = frozenset(
    {
        "env",
        "nohup",
        "nice",
        "timeout",
        "time",
        "command",
        "exec",
        "stdbuf",
        "ionice",
        "setsid",
        "unbuffer",
        "builtin",
        "coproc",
        "chrt",
        "taskset",
        "flock",
        "nsenter",
        "unshare",
        "firejail",
        "strace",
        "ltrace",
    }
)
_JUDGED_WRAPPERS = frozenset({"sudo", "doas", "xargs", "su", "chroot", "watch", "parallel"})
_TAKES_VALUE: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "xargs": frozenset({"-I", "-i", "-L", "-l", "-n", "-P", "-s", "-d", "-E", "-e", "-a"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "su": frozenset({"-c", "-s", "-g", "-G"}),
    "watch": frozenset({"-n", "-d"}),
    "exec": frozenset({"-a"}),
    "flock": frozenset({"-w", "-E", "-c"}),
    "taskset": frozenset({"-p"}),
}
_WRITE_OPERATORS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})
_DUP_OPERATORS = frozenset({">&", "<&"})
_OPERATORS = {
    "&&": "and",
    "||": "or",
    "|": "pipe",
    "|&": "pipe",
    ";": "sequence",
    "&": "background",
}
_STRUCTURE = frozenset({"program", "list", "pipeline", "redirected_statement", "comment"})
_GROUPING = {
    "subshell": "subshell",
    "negated_command": "negation",
    "compound_statement": "group",
}
_UNPROVEN_NODES = {
    "function_definition": "a function definition",
    "if_statement": "control flow (if)",
    "while_statement": "a loop",
    "for_statement": "a loop",
    "c_style_for_statement": "a loop",
    "case_statement": "control flow (case)",
    "test_command": "a [[ ]] test",
    "declaration_command": "a declaration (declare, export, local...)",
    "unset_command": "unset",
    "variable_assignment": "a shell variable assignment",
    "variable_assignments": "a shell variable assignment",
    "arithmetic_expansion": "arithmetic expansion",
}
_SUBSTITUTIONS = {
    "command_substitution": "command substitution",
    "process_substitution": "process substitution",
}
_EXPANSIONS = {
    "simple_expansion": "variable expansion",
    "expansion": "variable expansion",
    "arithmetic_expansion": "arithmetic expansion",
    "ansi_c_string": "ANSI-C quoting ($'...')",
    "translated_string": 'locale quoting ($"...")',
    "brace_expression": "brace expansion",
}
_MAX_DEPTH = 8


@dataclass(slots=True)
class _Word:
    text: str
    dynamic: bool = False
    glob: bool = False


@dataclass(slots=True)
class _Builder:
    commands: list[SimpleCommand] = field(default_factory=list)
    redirections: list[Redirection] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    unproven: list[str] = field(default_factory=list)
    error: str | None = None

    def doubt(self, reason: str) -> None:
        if reason not in self.unproven:
            self.unproven.append(reason)


class TreeSitterShellParser(IShellParser):
    """Parses with tree-sitter-bash; one parser per thread (parsers are not thread-safe)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> TreeSitterShellParser:
        """No settings needed."""
        return cls()

    def _parser(self) -> Parser:
        parser: Parser | None = getattr(self._local, "parser", None)
        if parser is None:
            parser = Parser(_LANGUAGE)
            self._local.parser = parser
        return parser

    def parse(self, command: str) -> ParsedCommand:
        """All simple commands ``command`` would run; ``error`` when it cannot be judged."""
        builder = _Builder()
        self._parse_into(builder, command, origin="top", depth=0)
        return ParsedCommand(
            commands=tuple(builder.commands),
            redirections=tuple(builder.redirections),
            error=builder.error,
            features=frozenset(builder.features),
            unproven=tuple(builder.unproven),
        )

    def _parse_into(self, builder: _Builder, script: str, *, origin: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            builder.error = builder.error or "commands are nested too deeply to judge"
            return
        if "\x00" in script:
            builder.error = builder.error or "the command contains a NUL byte"
            return
        source = script.encode("utf-8")
        tree = self._parser().parse(source)
        if tree.root_node.has_error:
            builder.error = builder.error or (
                f"cannot parse {script[:120]!r}: {_first_error(tree.root_node, source)}"
            )
        for reason in _misreadings(tree.root_node, source):
            builder.doubt(reason)
        _Walk(self, builder, source, depth).node(tree.root_node, origin)


class _Walk:
    """One pass over one syntax tree (a nested ``bash -c`` string gets its own)."""

    def __init__(
        self, parser: TreeSitterShellParser, builder: _Builder, source: bytes, depth: int
    ) -> None:
        self.parser = parser
        self.builder = builder
        self.source = source
        self.depth = depth

    def text(self, node: Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def node(self, node: Node, origin: str, *, quiet: bool = False) -> None:
        """Find the commands below ``node`` and note what cannot be read statically.

        ``quiet`` (inside a construct already noted) only looks for commands.
        """
        kind = node.type
        builder = self.builder
        if kind == "command":
            self.command(node, origin)
            return
        if kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            builder.redirections.extend(self.redirect(node, origin))
            return
        if kind in _SUBSTITUTIONS:
            builder.features.add("substitution")
            builder.doubt(_SUBSTITUTIONS[kind])
            for child in node.children:
                self.node(child, "substitution", quiet=True)
            return
        if kind == "ERROR" or node.is_missing:
            builder.error = builder.error or f"syntax error at {self.text(node)[:40]!r}"
        elif kind in _OPERATORS:
            builder.features.add(_OPERATORS[kind])
            if kind == "&":
                builder.doubt("a background job")
        elif kind in _GROUPING:
            builder.features.add(_GROUPING[kind])
            if kind == "compound_statement" and node.children and node.children[0].type == "((":
                builder.doubt("arithmetic evaluation")
                quiet = True
        elif quiet or kind in _STRUCTURE or kind in _HARMLESS_LEAVES or not node.is_named:
            pass
        elif kind in _UNPROVEN_NODES:
            builder.doubt(_UNPROVEN_NODES[kind])
            if kind == "function_definition":
                builder.features.add("function")
            quiet = True
        elif kind in _EXPANSIONS:
            builder.doubt(_EXPANSIONS[kind])
            quiet = True
        else:
            builder.doubt(f"a {kind.replace('_', ' ')}")
            quiet = True
        for child in node.children:
            self.node(child, origin, quiet=quiet)

    def command(self, node: Node, origin: str) -> None:
        argv: list[str] = []
        dynamic = False
        globbed: list[int] = []
        redirections: list[Redirection] = []
        assignments: list[str] = []
        for child in node.children:
            kind = child.type
            if kind == "comment":
                continue
            if kind == "variable_assignment":
                assignments.append(self.text(child))
                self.builder.doubt("a variable set for the command (NAME=value)")
                for part in child.children:
                    self.node(part, "substitution", quiet=True)
                continue
            if kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                redirections.extend(self.redirect(child, origin))
                continue
            target = child.children[0] if kind == "command_name" and child.children else child
            word = self.word(target)
            if word.glob:
                globbed.append(len(argv))
            argv.append(word.text)
            dynamic = dynamic or word.dynamic
        self.builder.redirections.extend(redirections)
        if not argv:
            return
        self.unwrap(argv, dynamic, origin, tuple(globbed), tuple(redirections), tuple(assignments))

    def unwrap(
        self,
        argv: list[str],
        dynamic: bool,
        origin: str,
        globbed: tuple[int, ...] = (),
        redirections: tuple[Redirection, ...] = (),
        assignments: tuple[str, ...] = (),
    ) -> None:
        builder = self.builder
        builder.commands.append(
            SimpleCommand(tuple(argv), dynamic, origin, globbed, redirections, assignments)
        )
        program = argv[0].rsplit("/", 1)[-1]
        depth = self.depth + 1
        if program in SHELLS and "-c" in argv[1:]:
            script_index = argv.index("-c", 1) + 1
            if script_index >= len(argv):
                builder.error = builder.error or f"{program} -c without a script"
            elif dynamic:
                builder.doubt(f"{program} -c runs a script only known at run time")
            else:
                self.parser._parse_into(builder, argv[script_index], origin="wrapper", depth=depth)
            return
        if program in ("eval", "source", "."):
            if program == "eval" and not dynamic:
                self.parser._parse_into(builder, " ".join(argv[1:]), origin="wrapper", depth=depth)
            else:
                builder.doubt(f"{program} runs code the line does not show")
            return
        if depth > _MAX_DEPTH:
            builder.error = builder.error or "commands are nested too deeply to judge"
            return
        inner: list[str] = []
        if program in _TRANSPARENT or program in _JUDGED_WRAPPERS:
            inner = wrapped_command(program, argv[1:])
        elif program == "find":
            for found in _find_exec(argv):
                self._unwrap_inner(found, True, depth)
            return
        if inner:
            self._unwrap_inner(inner, dynamic or program == "xargs", depth)

    def _unwrap_inner(self, argv: list[str], dynamic: bool, depth: int) -> None:
        nested = _Walk(self.parser, self.builder, self.source, depth)
        nested.unwrap(argv, dynamic, "wrapper")

    def redirect(self, node: Node, origin: str) -> list[Redirection]:
        builder = self.builder
        builder.features.add("redirection")
        operator = next((self.text(c) for c in node.children if not c.is_named), "")
        if node.type == "herestring_redirect":
            for child in node.named_children:
                self.word(child)
            return []
        if node.type == "heredoc_redirect":
            builder.features.add("heredoc")
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            quoted = start is not None and any(q in self.text(start) for q in "'\"\\")
            body = next((c for c in node.children if c.type == "heredoc_body"), None)
            if body is not None:
                text = self.text(body)
                if not quoted and any(mark in text for mark in ("$", "`", "\\")):
                    builder.doubt("a here-document that expands $, ` or \\")
                for child in body.children:
                    self.node(child, "substitution", quiet=True)
            # The grammar hangs the rest of the line on the here-document: in
            # ``cat <<EOF | rm -rf x`` the pipeline and its commands are children of it.
            for child in node.children:
                if child.type not in _HEREDOC_PARTS:
                    self.node(child, origin)
            return []
        destination = node.child_by_field_name("destination")
        if destination is None:
            named = [c for c in node.named_children if c.type != "file_descriptor"]
            destination = named[-1] if named else None
        if destination is None:
            return []
        word = self.word(destination)
        if operator in _DUP_OPERATORS and (destination.type == "number" or word.text == "-"):
            return []
        writes = operator in _WRITE_OPERATORS or operator in _DUP_OPERATORS
        if word.glob:
            builder.doubt("a redirection to a glob pattern")
        return [Redirection(operator, word.text, writes, word.dynamic or word.glob)]

    def double_quoted(self, node: Node) -> _Word:
        """A double-quoted word as bash reads it.

        Only a backslash before ``$``, a backquote, ``"``, a backslash or a newline escapes
        anything. The grammar leaves some literal text (a newline) between its children, so
        the text is read from the source between them rather than from the children alone.
        """
        builder = self.builder
        parts: list[str] = []
        literal: list[str] = []
        dynamic = False
        position = node.start_byte + 1
        children = [c for c in node.children if c.type != '"']
        closed = bool(node.children) and node.children[-1].type == '"'
        end = node.end_byte - 1 if closed else node.end_byte
        for child in children:
            if child.start_byte > position:
                literal.append(self.source[position : child.start_byte].decode("utf-8", "replace"))
            position = max(position, child.end_byte)
            if child.type == "string_content":
                literal.append(self.text(child))
                continue
            parts.append(_unescape_double_quoted("".join(literal)))
            literal = []
            if child.type == "$":
                builder.doubt(_EXPANSIONS["translated_string"])
                dynamic = True
                continue
            part = self.word(child)
            parts.append(part.text)
            dynamic = dynamic or part.dynamic
        if end > position:
            literal.append(self.source[position:end].decode("utf-8", "replace"))
        parts.append(_unescape_double_quoted("".join(literal)))
        return _Word("".join(parts), dynamic)

    def word(self, node: Node) -> _Word:
        """The word as the program would receive it, and whether it is only known at run time."""
        kind = node.type
        text = self.text(node)
        builder = self.builder
        if kind == "word":
            marks = _unquoted_marks(text)
            for reason, found in marks.items():
                if found and reason != "glob":
                    builder.doubt(reason)
            dynamic = any(marks[reason] for reason in _DYNAMIC_MARKS)
            return _Word(_unescape(text), dynamic, marks["glob"])
        if kind == "raw_string":
            return _Word(text[1:-1])
        if kind == "number":
            return _Word(text)
        if kind == "string":
            return self.double_quoted(node)
        if kind == "concatenation":
            parts: list[str] = []
            dynamic = glob = False
            for child in node.children:
                if child.type == "$":
                    builder.doubt(_EXPANSIONS["translated_string"])
                    dynamic = True
                    continue
                part = self.word(child)
                parts.append(part.text)
                dynamic = dynamic or part.dynamic
                glob = glob or part.glob
            return _Word("".join(parts), dynamic, glob)
        if kind == "$":
            builder.doubt('locale quoting ($"...") or a lone $')
            return _Word(text, True)
        # Expansions and substitutions note themselves; anything else is noted here.
        self.node(node, "substitution")
        if kind not in _SUBSTITUTIONS and kind not in _EXPANSIONS:
            builder.doubt(f"a {kind.replace('_', ' ')}")
        return _Word(text, True)


_HARMLESS_LEAVES = frozenset({"word", "string_content", "number", "file_descriptor"})
_DYNAMIC_MARKS = (
    "variable expansion",
    "command substitution",
    "tilde expansion",
    "brace expansion",
)


def _unquoted_marks(text: str) -> dict[str, bool]:
    """Which expansions an unquoted word's raw text triggers (backslash-escaped ones do not)."""
    found = dict.fromkeys((*_DYNAMIC_MARKS, "glob", "history or extended-glob !"), False)
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
            continue
        if char == "\\":
            escaped = True
        elif char == "$":
            found["variable expansion"] = True
        elif char == "`":
            found["command substitution"] = True
        elif char == "~" and (index == 0 or text[index - 1] in "=:"):
            # Only a word's first ~, or one after = or : (assignment-like words), expands:
            # HEAD~1 stays as it is.
            found["tilde expansion"] = True
        elif char in "{}":
            found["brace expansion"] = True
        elif char in "*?[":
            found["glob"] = True
        elif char == "!" and index + 1 < len(text) and text[index + 1] == "(":
            found["history or extended-glob !"] = True
    return found


_HEREDOC_PARTS = frozenset({"<<", "<<-", "heredoc_start", "heredoc_body", "heredoc_end"})
# Read whole: their insides are text, not tokens.
_WHOLE = frozenset(
    {"string", "raw_string", "ansi_c_string", "translated_string", "heredoc_body", "comment"}
)
_WORDLIKE = frozenset(
    {
        "command_name",
        "word",
        "string",
        "raw_string",
        "ansi_c_string",
        "translated_string",
        "concatenation",
        "number",
        "simple_expansion",
        "expansion",
        "command_substitution",
        "arithmetic_expansion",
    }
)
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")


def _misreadings(root: Node, source: bytes) -> list[str]:
    r"""Where the grammar reads the line otherwise than bash would.

    The grammar is not bash: it takes a carriage return (and other control characters) for
    blank space, so ``\r#`` starts a comment for it and not for bash; it drops a backslash
    before a blank (``\\ x``), splits a word around a backslash-newline, keeps a newline
    inside a word after a backslash (``\n\\rm`` is a new command for bash), and takes the
    words after a redirection's target for more targets (they are arguments for bash). Each
    of these makes the line run otherwise than it reads, so each is a doubt.
    """
    found: list[str] = []
    if _CONTROL.search(source):
        found.append("a control character (bash and the grammar read it differently)")
    if b"\\\n" in source:
        found.append("a line continuation (backslash-newline)")
    leaves: list[Node] = []
    pending = [root]
    while pending:
        node = pending.pop()
        if node.type in _WHOLE or node.child_count == 0:
            leaves.append(node)
            continue
        if node.type == "command":
            named = node.named_children
            for before, after in itertools.pairwise(named):
                if (
                    before.type in _WORDLIKE
                    and after.type in _WORDLIKE
                    and before.end_byte == after.start_byte
                ):
                    found.append("one word the grammar reads as two")
        if node.type == "file_redirect":
            targets = [c for c in node.named_children if c.type != "file_descriptor"]
            if len(targets) > 1:
                found.append("words after a redirection's target")
        if node.type == "word" and b"\n" in source[node.start_byte : node.end_byte]:
            found.append("a newline inside a word")
        pending.extend(node.children)
    position = 0
    for leaf in sorted(leaves, key=lambda n: n.start_byte):
        if source[position : leaf.start_byte].strip(b" \t\n"):
            found.append("text the grammar skipped")
        if leaf.type == "word" and b"\n" in source[leaf.start_byte : leaf.end_byte]:
            found.append("a newline inside a word")
        position = max(position, leaf.end_byte)
    if source[position:].strip(b" \t\n"):
        found.append("text the grammar skipped")
    return list(dict.fromkeys(found))


def _unescape_double_quoted(text: str) -> str:
    if "\\" not in text:
        return text
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _unescape(word: str) -> str:
    return re.sub(r"\\(.)", r"\1", word, flags=re.DOTALL) if "\\" in word else word


def wrapped_command(program: str, args: list[str]) -> list[str]:
    """The command a wrapper runs: its arguments after its own options and settings.

    ``env -S STRING`` splits STRING into the start of that command, as env does.
    """
    rest = list(args)
    takes_value = _TAKES_VALUE.get(program, frozenset())
    split: list[str] = []
    while rest:
        head = rest[0]
        if head == "--":
            rest = rest[1:]
            break
        if program == "env" and (head.startswith(("-S", "--split-string"))):
            value = rest[1] if head in ("-S", "--split-string") and len(rest) > 1 else ""
            if head.startswith("--split-string="):
                value = head.split("=", 1)[1]
            elif head.startswith("-S") and head != "-S":
                value = head[2:]
            try:
                split = shlex.split(value)
            except ValueError:
                split = value.split()
            rest = rest[2:] if head in ("-S", "--split-string") else rest[1:]
            continue
        if head.startswith("-") and head != "-":
            rest = rest[2:] if head in takes_value else rest[1:]
            continue
        if program == "env" and "=" in head:
            rest = rest[1:]
            continue
        break
    if program == "timeout" and rest:
        rest = rest[1:]  # the duration
    if program == "su":
        if "-c" in args:
            index = args.index("-c") + 1
            return ["sh", "-c", args[index]] if index < len(args) else []
        return []
    return [*split, *rest]


def _find_exec(argv: list[str]) -> list[list[str]]:
    commands: list[list[str]] = []
    index = 0
    while index < len(argv):
        if argv[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(argv) and argv[end] not in (";", "+", "\\;"):
                end += 1
            inner = [a for a in argv[index + 1 : end] if a != "{}"]
            if inner:
                commands.append(inner)
            index = end
        index += 1
    return commands


def _first_error(node: Node, source: bytes) -> str:
    stack: list[Node] = [node]
    while stack:
        current = stack.pop(0)
        if current.type == "ERROR" or current.is_missing:
            fragment = source[current.start_byte : current.end_byte].decode("utf-8", "replace")
            return f"syntax error at {fragment[:40]!r}"
        stack.extend(current.children)
    return "syntax error"
