"""Port for the set of tools available to tasks."""

from __future__ import annotations

import abc
from collections.abc import Iterable

from core_agent.contracts.tool import ITool, ToolSpec


class IToolRegistry(abc.ABC):
    """Holds tools by unique name. Lookups never block."""

    @abc.abstractmethod
    def register(self, tool: ITool) -> None:
        """Add a tool.

        Raises:
            ToolRegistrationError: The name is invalid or already registered.
        """

    @abc.abstractmethod
    def get(self, name: str) -> ITool:
        """Return the tool called ``name``.

        Raises:
            ToolNotFoundError: No such tool; the message lists the registered names.
        """

    @abc.abstractmethod
    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs of the registered tools (or of ``names`` only), sorted by name.

        Raises:
            ToolNotFoundError: One of ``names`` is not registered.
        """

    @abc.abstractmethod
    def names(self) -> list[str]:
        """The registered names, sorted."""
