"""Which tools found at run time (an MCP server's) join, when ``AGENT_TOOLS`` names some.

The tools of MCP servers are known only once a server is asked, after the kernel is built,
so ``AGENT_TOOLS`` (or an agent file's ``tools:``) cannot be checked against them then. A
name in it of the form ``<server>__<tool>``, or ``<server>__*`` for all of a server's tools,
where ``<server>`` is a declared server, is taken as a choice among those tools:

* when the list names none of them, every server's tools join (as before: declaring a
  server is enough to use it);
* when it names some, only those join, and a server it does not name contributes none;
* a name no server offers once they are asked is reported in the log (the kernel runs on
  without it, as it does without a server that fails to start).

A name's server is what precedes its first ``__``. That reading is exact only because a
server's name holds no ``__`` and does not end with ``_`` (the MCP provider refuses other
names when the kernel is built): with servers ``a`` and ``a_``, ``a___echo`` would be
``a``'s tool ``_echo`` and ``a_``'s ``echo`` alike, and no matching against the declared
names could tell which ``a__*`` means.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from core_agent.contracts.tool import ITool

log = logging.getLogger(__name__)

SEPARATOR = "__"
"""Between a server's name and its tool's, as MCP tools are named."""
WHOLE_SERVER = "*"


@dataclass(frozen=True, slots=True)
class DiscoveredToolSelection:
    """The server tools a tool list names: exact names, and servers taken whole."""

    names: frozenset[str]
    servers: frozenset[str]

    def selects(self, name: str) -> bool:
        """Whether the tool called ``name`` is chosen."""
        server, separator, _ = name.partition(SEPARATOR)
        return name in self.names or (bool(separator) and server in self.servers)

    def picking(self, discover: Callable[[], Iterable[ITool]]) -> Callable[[], list[ITool]]:
        """``discover``, keeping only the chosen tools; chosen names it lacks are logged."""

        def pick() -> list[ITool]:
            found = list(discover())
            offered = {tool.spec.name for tool in found}
            for name in sorted(self.names - offered):
                log.warning(
                    "the tool list names %r, which no MCP server offers; available: %s",
                    name,
                    ", ".join(sorted(offered)) or "none",
                )
            return [tool for tool in found if self.selects(tool.spec.name)]

        return pick


def split_tool_list(
    wanted: Sequence[str], servers: Collection[str]
) -> tuple[list[str], DiscoveredToolSelection | None]:
    """``wanted`` without the names of ``servers``' tools, and the choice those names make.

    The choice is ``None`` when ``wanted`` names no server tool (every one joins).
    """
    rest: list[str] = []
    names: set[str] = set()
    whole: set[str] = set()
    for name in wanted:
        server, separator, tool = name.partition(SEPARATOR)
        if not separator or server not in servers or not tool:
            rest.append(name)
        elif tool == WHOLE_SERVER:
            whole.add(server)
        else:
            names.add(name)
    if not names and not whole:
        return rest, None
    return rest, DiscoveredToolSelection(frozenset(names), frozenset(whole))
