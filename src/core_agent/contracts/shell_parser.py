"""Port that splits a shell command line into the simple commands it would run."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One program invocation: its argv as the shell would pass it (quotes removed).

    ``dynamic`` is true when a word is only known at run time (``$VAR``, ``$(...)``, globs),
    so the argv shown is a lower bound of what runs.
    """

    argv: tuple[str, ...]
    dynamic: bool = False
    origin: str = "top"
    """Where it was found: ``top``, ``substitution``, ``wrapper`` (``bash -c``, ``env``,
    ``xargs``, ``find -exec``...)."""


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """Every simple command a command line runs, or why it could not be parsed."""

    commands: tuple[SimpleCommand, ...] = ()
    redirections: tuple[str, ...] = ()
    """Targets of output redirections (``> file``, ``>> file``)."""
    error: str | None = None
    features: frozenset[str] = field(default_factory=frozenset)
    """Constructs used: ``pipe``, ``and``, ``or``, ``sequence``, ``substitution``, ``subshell``,
    ``background``, ``function``, ``heredoc``..."""

    @property
    def ok(self) -> bool:
        """Parsed without error."""
        return self.error is None


class IShellParser(abc.ABC):
    """Parses POSIX/bash command lines with a real grammar. Pure; never blocks; never runs."""

    @abc.abstractmethod
    def parse(self, command: str) -> ParsedCommand:
        """Split ``command`` into the simple commands it runs.

        ``bash -c``/``sh -c`` strings, ``env``, ``xargs``, ``find -exec``, ``sudo``,
        ``timeout``, ``nice`` and substitutions are unwrapped. Never raises for bad input: a
        command that cannot be parsed fully comes back with ``error`` set (and must then not be
        allowed).
        """
