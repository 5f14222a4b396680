"""Port that splits a shell command line into the simple commands it would run."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Redirection:
    """One redirection of a command's input or output (``> out.txt``, ``< in.txt``, ``2>&1``)."""

    operator: str
    target: str
    writes: bool
    """It creates, truncates or appends to ``target`` (a file)."""
    dynamic: bool = False
    """The target is only known at run time (``> $HOME/x``)."""


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One program invocation: its argv as the shell would pass it (quotes removed).

    ``dynamic`` is true when a word is only known at run time (``$VAR``, ``$(...)``), so the
    argv shown is a lower bound of what runs. ``globbed`` lists the argv positions holding an
    unquoted glob pattern (``*.py``), which the shell replaces by matching file names.
    """

    argv: tuple[str, ...]
    dynamic: bool = False
    origin: str = "top"
    """Where it was found: ``top``, ``substitution``, ``wrapper`` (``bash -c``, ``env``,
    ``xargs``, ``find -exec``...)."""
    globbed: tuple[int, ...] = ()
    redirections: tuple[Redirection, ...] = ()
    assignments: tuple[str, ...] = ()
    """``NAME=value`` settings placed before the program (``LANG=C sort``)."""


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """Every simple command a command line runs, or why it could not be parsed.

    ``unproven`` names every construct whose effect cannot be read from the text alone
    (expansions, substitutions, assignments, functions, loops, here-documents that expand...):
    a line with any is not provably harmless, whatever its programs are.
    """

    commands: tuple[SimpleCommand, ...] = ()
    redirections: tuple[Redirection, ...] = ()
    """Every redirection in the line, of commands and of compound statements."""
    error: str | None = None
    features: frozenset[str] = field(default_factory=frozenset)
    """Constructs used: ``pipe``, ``and``, ``or``, ``sequence``, ``substitution``, ``subshell``,
    ``background``, ``function``, ``heredoc``..."""
    unproven: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Parsed without error."""
        return self.error is None

    @property
    def write_targets(self) -> tuple[str, ...]:
        """Files the line writes through redirections (dynamic ones as written)."""
        return tuple(r.target for r in self.redirections if r.writes)


class IShellParser(abc.ABC):
    """Parses POSIX/bash command lines with a real grammar. Pure; never blocks; never runs."""

    @abc.abstractmethod
    def parse(self, command: str) -> ParsedCommand:
        """Split ``command`` into the simple commands it runs.

        ``bash -c``/``sh -c`` strings, ``env``, ``xargs``, ``find -exec``, ``sudo``,
        ``timeout``, ``nice``, ``exec`` and substitutions are unwrapped, and the commands in
        assignments, here-strings and arithmetic are found too. Never raises for bad input: a
        command that cannot be parsed fully comes back with ``error`` set, with the commands
        that could be found.
        """
