"""The in-memory tool registry."""

from __future__ import annotations

from collections.abc import Iterable

from core_agent.contracts.errors import ToolNotFoundError, ToolRegistrationError
from core_agent.contracts.tool import TOOL_NAME_PATTERN, ITool, ToolSpec
from core_agent.contracts.tool_registry import IToolRegistry


class ToolRegistry(IToolRegistry):
    """Tools by unique name, in a dict; safe to share between concurrent tasks (read-only use)."""

    def __init__(self, tools: Iterable[ITool] = ()) -> None:
        self._tools: dict[str, ITool] = {}
        for item in tools:
            self.register(item)

    def register(self, tool: ITool) -> None:
        """Add ``tool``; its name must be valid and free."""
        name = tool.spec.name
        if not TOOL_NAME_PATTERN.match(name):
            raise ToolRegistrationError(
                f"tool name {name!r} must match {TOOL_NAME_PATTERN.pattern}"
            )
        if name in self._tools:
            raise ToolRegistrationError(f"a tool named {name!r} is already registered")
        parameters = tool.spec.parameters
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ToolRegistrationError(
                f"tool {name!r}: parameters must be a JSON Schema of type 'object'"
            )
        self._tools[name] = tool

    def get(self, name: str) -> ITool:
        """The tool called ``name``, or ``ToolNotFoundError`` listing the known names."""
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFoundError(
                f"unknown tool {name!r}; available tools: {', '.join(self.names()) or 'none'}",
                tool_name=name,
            ) from None

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs of all tools, or of ``names``, sorted by name."""
        selected = self.names() if names is None else sorted(set(names))
        return [self.get(name).spec for name in selected]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._tools)
