"""The in-memory tool registry."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from core_agent.contracts.errors import ToolNotFoundError, ToolRegistrationError
from core_agent.contracts.tool import TOOL_NAME_PATTERN, ITool, ToolSpec
from core_agent.contracts.tool_registry import IToolRegistry

log = logging.getLogger(__name__)


class ToolRegistry(IToolRegistry):
    """Tools by unique name, in a dict; safe to share between concurrent tasks (read-only use)."""

    def __init__(self, tools: Iterable[ITool] = ()) -> None:
        self._tools: dict[str, ITool] = {}
        self._deferred: list[
            tuple[Callable[[], Iterable[ITool]], Callable[[ITool], str | None] | None]
        ] = []
        self._discovering = threading.Lock()
        for item in tools:
            self.register(item)

    def defer(
        self,
        discover: Callable[[], Iterable[ITool]],
        screen: Callable[[ITool], str | None] | None = None,
    ) -> None:
        """Add the tools ``discover`` returns when tools are first looked up, not now.

        For tools found by asking a server (``discovered_tools`` of a capability): it runs
        once, on the first ``get``, ``specs`` or ``names``, and may block that call. A tool
        it returns whose name is invalid or taken (a built-in tool is never shadowed), or
        for which ``screen`` gives a reason, is left out with a warning.
        """
        self._deferred.append((discover, screen))

    def _discover(self) -> None:
        # A lookup made while another thread discovers waits for it: the list it found
        # empty was taken by that thread, whose tools are not registered yet.
        if not self._deferred and not self._discovering.locked():
            return
        with self._discovering:
            while self._deferred:
                discover, screen = self._deferred.pop(0)
                for item in discover():
                    refused = screen(item) if screen is not None else None
                    if refused is not None:
                        log.warning("discovered tool %r is left out: %s", item.spec.name, refused)
                        continue
                    try:
                        self.register(item)
                    except ToolRegistrationError as exc:
                        log.warning("a discovered tool is left out: %s", exc)

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
        if name not in self._tools:
            self._discover()
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
        self._discover()
        return sorted(self._tools)
