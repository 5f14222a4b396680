"""What is wrong with an agent file, and where: file, line and column of each problem."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core_agent.contracts.errors import ConfigurationError


@dataclass(frozen=True, slots=True, order=True)
class AgentFileProblem:
    """One problem, at a 1-based line and column of the file (0 when not tied to a place)."""

    line: int
    column: int
    message: str

    def located(self, source: str) -> str:
        """``source:line:column: message``, as compilers and linters print it."""
        if self.line < 1:
            return f"{source}: {self.message}"
        return f"{source}:{self.line}:{self.column}: {self.message}"


class AgentFileError(ConfigurationError):
    """An agent file that cannot be used; nothing of it was applied.

    ``str()`` is one line, the first problem in file order (and how many more there are), so
    a command prints it as is; ``problems`` holds them all.

    Attributes:
        source: The file, as it was named.
        problems: Every problem found, in file order.
    """

    def __init__(self, source: str, problems: Sequence[AgentFileProblem]) -> None:
        self.source = source
        self.problems = sorted(problems) or [AgentFileProblem(0, 0, "unusable agent file")]
        first = self.problems[0].located(source)
        more = len(self.problems) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        super().__init__(first + suffix)

    @classmethod
    def at(cls, source: str, line: int, column: int, message: str) -> AgentFileError:
        """An error with one problem."""
        return cls(source, [AgentFileProblem(line, column, message)])
