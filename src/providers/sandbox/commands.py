"""Judging shell commands: every program a command line would run must be allowed.

Allowed commands are argv prefixes (``git status`` allows ``git status --short`` but not
``git push``). The command line is parsed with a real shell grammar; each simple command
found (in pipes, lists, substitutions, ``bash -c`` strings, ``xargs``, ``find -exec``...) must
match a prefix, must not use a flag that turns a reading program into a writing or executing
one, and must not name a path outside the workspace; output redirections must point at
writable workspace paths. What cannot be parsed is refused. Words only known at run time
(``$VAR``) cannot be checked; allow only programs you would let a script run.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from core_agent.contracts.shell_parser import IShellParser, ParsedCommand, SimpleCommand
from core_agent.contracts.tool import Capability
from core_agent.contracts.tool_sandbox import SandboxVerdict
from providers.sandbox.paths import PathGuard

FORBIDDEN_FLAGS: dict[str, frozenset[str]] = {
    "find": frozenset({"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}),
    "git": frozenset({"-c", "--exec-path", "--upload-pack", "--receive-pack", "--config-env"}),
    "sort": frozenset({"-o", "--output"}),
    "tree": frozenset({"-o"}),
    "rg": frozenset({"--pre"}),
    "grep": frozenset(),
}
"""Flags that make an otherwise read-only program write files or run programs."""


class CommandGuard:
    """Allows a command line only when every sub-command matches an allowed prefix."""

    def __init__(self, parser: IShellParser, allowed: Sequence[str], paths: PathGuard) -> None:
        self._parser = parser
        self._prefixes = [tuple(shlex.split(prefix)) for prefix in allowed if prefix.strip()]
        self._paths = paths

    def parse(self, command: str) -> ParsedCommand:
        """The parsed command line."""
        return self._parser.parse(command)

    def check(self, command: str) -> SandboxVerdict:
        """Allowed, or the first reason it is not."""
        if not command.strip():
            return SandboxVerdict(False, "the command is empty")
        parsed = self._parser.parse(command)
        if not parsed.ok:
            return SandboxVerdict(False, f"the command cannot be judged: {parsed.error}")
        if not parsed.commands:
            return SandboxVerdict(False, "the command runs no program")
        for simple in parsed.commands:
            reason = self._refusal(simple)
            if reason:
                return SandboxVerdict(False, reason)
        for target in parsed.redirections:
            verdict = self._paths.check(target, Capability.WRITE)
            if not verdict.allowed:
                return SandboxVerdict(False, f"output redirection: {verdict.reason}")
        return SandboxVerdict(True)

    def _refusal(self, simple: SimpleCommand) -> str | None:
        argv = simple.argv
        shown = " ".join(argv)[:120]
        program = argv[0]
        if "$" in program or "`" in program or any(c in program for c in "*?["):
            return f"{shown!r}: the program is only known at run time"
        name = program.rsplit("/", 1)[-1]
        normalized = (name, *argv[1:])
        if not any(normalized[: len(prefix)] == prefix for prefix in self._prefixes):
            allowed = ", ".join(" ".join(p) for p in self._prefixes) or "none"
            return f"{shown!r} is not an allowed command (allowed: {allowed})"
        forbidden = FORBIDDEN_FLAGS.get(name, frozenset())
        for word in argv[1:]:
            flag = word.split("=", 1)[0]
            if flag in forbidden:
                return f"{shown!r}: the flag {flag} is not allowed for {name}"
            # Allowed programs still only see the workspace: `cat /etc/passwd` is refused.
            value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
            if _looks_like_path(value):
                verdict = self._paths.check(value, Capability.READ)
                if not verdict.allowed:
                    return f"{shown!r}: {verdict.reason}"
        return None


def _looks_like_path(word: str) -> bool:
    if not word or "://" in word or word.startswith("-") or "$" in word or "`" in word:
        return False
    return word.startswith(("/", "~", ".")) or "/" in word
