"""``IShellParser`` on tree-sitter's bash grammar: a real parser, not a regex.

Every ``command`` node in the syntax tree is a program that would run, wherever it sits:
in a pipeline, after ``&&``/``||``/``;``, in ``$(...)`` or backticks, in a subshell, an ``if``
or a loop. Wrappers that run another program (``bash -c '...'``, ``env``, ``xargs``,
``find -exec``, ``sudo``, ``timeout``, ``nice``, ``nohup``, ``eval``...) are unwrapped so that
the program they run is judged too. Anything the grammar cannot parse is reported as an error,
never guessed.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.shell_parser import IShellParser, ParsedCommand, SimpleCommand

_LANGUAGE = Language(tree_sitter_bash.language())
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
# Programs that run their arguments as another program and add nothing we judge.
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
    }
)
# Programs that run another program and are themselves judged (privilege, fan-out).
_JUDGED_WRAPPERS = frozenset({"sudo", "doas", "xargs", "su", "chroot", "watch", "parallel"})
_WRITE_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|", "1>", "2>", ">&"})
_GLOB = re.compile(r"(?<!\\)[*?\[]")
_MAX_DEPTH = 8


class _Builder:
    def __init__(self, source: bytes) -> None:
        self.source = source
        self.commands: list[SimpleCommand] = []
        self.redirections: list[str] = []
        self.features: set[str] = set()
        self.error: str | None = None

    def text(self, node: Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "replace")


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
        builder = _Builder(command.encode("utf-8"))
        self._parse_into(builder, command, origin="top", depth=0)
        return ParsedCommand(
            commands=tuple(builder.commands),
            redirections=tuple(builder.redirections),
            error=builder.error,
            features=frozenset(builder.features),
        )

    def _parse_into(self, builder: _Builder, script: str, *, origin: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            builder.error = "commands are nested too deeply to judge"
            return
        if "\x00" in script:
            builder.error = "the command contains a NUL byte"
            return
        source = script.encode("utf-8")
        tree = self._parser().parse(source)
        local = _Builder(source)
        local.features = builder.features
        if tree.root_node.has_error:
            builder.error = f"cannot parse {script[:120]!r}: {_first_error(tree.root_node, source)}"
            return
        self._walk(local, tree.root_node, origin, depth)
        builder.commands.extend(local.commands)
        builder.redirections.extend(local.redirections)
        builder.error = builder.error or local.error

    def _walk(self, builder: _Builder, node: Node, origin: str, depth: int) -> None:
        kind = node.type
        if kind == "command":
            self._command(builder, node, origin, depth)
            return
        if kind in _FEATURE_OF_NODE:
            builder.features.add(_FEATURE_OF_NODE[kind])
        if kind in ("list", "pipeline", "program"):
            for child in node.children:
                operator = _OPERATORS.get(child.type)
                if operator:
                    builder.features.add(operator)
        if kind == "file_redirect":
            self._redirect(builder, node)
        for child in node.children:
            self._walk(builder, child, origin, depth)

    def _redirect(self, builder: _Builder, node: Node) -> None:
        operator = next((builder.text(c) for c in node.children if not c.is_named), "")
        destination = node.child_by_field_name("destination")
        builder.features.add("redirection")
        if operator in _WRITE_REDIRECTS and destination is not None:
            target = self._word(builder, destination, depth=0)[0]
            if target not in ("/dev/null", "&1", "&2", "1", "2"):
                builder.redirections.append(target)

    def _command(self, builder: _Builder, node: Node, origin: str, depth: int) -> None:
        argv: list[str] = []
        dynamic = False
        for child in node.children:
            if child.type in ("variable_assignment", "comment"):
                continue
            if child.type == "file_redirect":
                self._redirect(builder, child)
                continue
            if child.type == "herestring_redirect":
                builder.features.add("redirection")
                continue
            target = child.children[0] if child.type == "command_name" and child.children else child
            word, is_dynamic = self._word(builder, target, depth)
            argv.append(word)
            dynamic = dynamic or is_dynamic
        if not argv:
            return
        self._unwrap(builder, argv, dynamic, origin, depth)

    def _unwrap(
        self, builder: _Builder, argv: list[str], dynamic: bool, origin: str, depth: int
    ) -> None:
        program = argv[0].rsplit("/", 1)[-1]
        if program in _SHELLS and "-c" in argv[1:]:
            script_index = argv.index("-c", 1) + 1
            if script_index >= len(argv):
                builder.error = f"{program} -c without a script"
                return
            if dynamic:
                builder.error = f"{program} -c runs a script only known at run time"
                return
            self._parse_into(builder, argv[script_index], origin="wrapper", depth=depth + 1)
            return
        if program == "eval":
            if dynamic:
                builder.error = "eval of a value only known at run time"
                return
            self._parse_into(builder, " ".join(argv[1:]), origin="wrapper", depth=depth + 1)
            return
        if program in _TRANSPARENT:
            inner = _after_options(program, argv[1:])
            if inner:
                self._unwrap(builder, inner, dynamic, "wrapper", depth + 1)
            else:
                builder.commands.append(SimpleCommand(tuple(argv), dynamic, origin))
            return
        builder.commands.append(SimpleCommand(tuple(argv), dynamic, origin))
        if program in _JUDGED_WRAPPERS:
            inner = _after_options(program, argv[1:])
            if program == "xargs":
                inner = inner or ["echo"]
                self._unwrap(builder, inner, True, "wrapper", depth + 1)  # args come from stdin
            elif inner:
                self._unwrap(builder, inner, dynamic, "wrapper", depth + 1)
        elif program == "find":
            for inner in _find_exec(argv):
                self._unwrap(builder, inner, True, "wrapper", depth + 1)

    def _word(self, builder: _Builder, node: Node, depth: int) -> tuple[str, bool]:
        """The word as the program would receive it, and whether it is only known at run time."""
        kind = node.type
        text = builder.text(node)
        if kind == "raw_string":
            return text[1:-1], False
        if kind in ("command_substitution", "process_substitution"):
            builder.features.add("substitution")
            for child in node.children:
                self._walk(builder, child, "substitution", depth)
            return text, True
        if kind in ("simple_expansion", "expansion", "arithmetic_expansion"):
            return text, True
        if kind in ("string", "concatenation", "translated_string"):
            parts: list[str] = []
            dynamic = False
            for child in node.children:
                if child.type in ('"', "$"):
                    continue
                if child.type == "string_content":
                    parts.append(builder.text(child))
                    continue
                part, part_dynamic = self._word(builder, child, depth)
                parts.append(part)
                dynamic = dynamic or part_dynamic
            if kind == "concatenation" and not node.children:
                return text, False
            return "".join(parts), dynamic
        if kind == "word":
            return _unescape(text), bool(_GLOB.search(text))
        return text, kind not in ("number",)


def _unescape(word: str) -> str:
    return re.sub(r"\\(.)", r"\1", word) if "\\" in word else word


def _after_options(program: str, args: list[str]) -> list[str]:
    """The command a wrapper runs: its arguments after its own options and settings."""
    rest = list(args)
    takes_value = {
        "env": {"-u", "--unset", "-C", "--chdir", "-S"},
        "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"},
        "nice": {"-n", "--adjustment"},
        "timeout": {"-s", "--signal", "-k", "--kill-after"},
        "xargs": {"-I", "-i", "-L", "-l", "-n", "-P", "-s", "-d", "-E", "-e", "-a"},
        "stdbuf": {"-i", "-o", "-e"},
        "ionice": {"-c", "-n", "-p"},
        "su": {"-c", "-s", "-g", "-G"},
        "watch": {"-n", "-d"},
    }.get(program, set())
    while rest:
        head = rest[0]
        if head == "--":
            rest = rest[1:]
            break
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
        # su -c 'cmd' user: the script is the value of -c.
        if "-c" in args:
            index = args.index("-c") + 1
            return ["sh", "-c", args[index]] if index < len(args) else []
        return []
    return rest


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
    stack: list[Any] = [node]
    while stack:
        current = stack.pop(0)
        if current.type == "ERROR" or current.is_missing:
            fragment = source[current.start_byte : current.end_byte].decode("utf-8", "replace")
            return f"syntax error at {fragment[:40]!r}"
        stack.extend(current.children)
    return "syntax error"


_OPERATORS = {
    "&&": "and",
    "||": "or",
    "|": "pipe",
    "|&": "pipe",
    ";": "sequence",
    "&": "background",
}
_FEATURE_OF_NODE = {
    "subshell": "subshell",
    "function_definition": "function",
    "heredoc_redirect": "heredoc",
    "command_substitution": "substitution",
    "process_substitution": "substitution",
    "if_statement": "conditional",
    "for_statement": "loop",
    "while_statement": "loop",
    "c_style_for_statement": "loop",
}
