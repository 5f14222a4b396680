"""Port through which an application contributes its own tools and context."""

from __future__ import annotations

import abc

from core_agent.contracts.tool import ITool


class IBusinessCapabilityProvider(abc.ABC):
    """An application-specific bundle: tools and instructions, with no kernel internals."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Unique name of the bundle, for configuration and traces."""

    @abc.abstractmethod
    def tools(self) -> list[ITool]:
        """Tools the application offers to the agent. Never blocks."""

    @abc.abstractmethod
    def system_instructions(self) -> str:
        """Text added to the system prompt (domain vocabulary, rules); may be empty."""
