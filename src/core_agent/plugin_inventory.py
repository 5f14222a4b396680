"""What is installed: every provider, tool and capability provider, and where it comes from.

Read from the same entry-point metadata the container resolves names from: for each
``core_agent.*`` group, each entry point with the distribution (name and version) that
declares it, and whether it loads. Loading imports the module and finds the object, nothing
more: no factory is called, so no store is opened and no model is reached. A broken entry
point (a missing module, a typo in its target, a module that raises) is reported with its
error, never raised. A ``core_agent.*`` group the kernel does not read is listed too, with
the group it was probably meant for: a misspelt group is otherwise a plugin that silently
never appears.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from importlib.metadata import EntryPoint, distributions
from typing import Any

from core_agent.container import ENTRY_POINT_GROUPS, TOOLS, build_kernel_tools
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings

GROUP_PREFIX = "core_agent."
KERNEL_DISTRIBUTION = "core-agent"


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """One entry point (or one of the kernel's own tools) and whether it loads."""

    name: str
    target: str
    """``module:object`` the entry point names, or ``kernel`` for the kernel's own tools."""
    distribution: str
    version: str
    loads: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PluginGroup:
    """An entry-point group with what is installed in it."""

    group: str
    read_by_kernel: bool
    plugins: list[InstalledPlugin] = field(default_factory=list)
    note: str | None = None


def plugin_inventory() -> list[PluginGroup]:
    """Every group the kernel reads, and any other ``core_agent.*`` group installed.

    A group with nothing installed (``core_agent.capabilities``, often) is listed empty.
    """
    known = list(ENTRY_POINT_GROUPS)
    found: dict[str, list[InstalledPlugin]] = {group: [] for group in known}
    for entry_point, distribution, version in _entry_points():
        found.setdefault(entry_point.group, []).append(_check(entry_point, distribution, version))
    found[TOOLS].extend(_kernel_tools())
    groups = []
    for group in sorted(found):
        read = group in known
        note = None
        if not read:
            close = difflib.get_close_matches(group, known, n=1, cutoff=0.6)
            note = "not read by the kernel" + (f" (did you mean {close[0]}?)" if close else "")
        plugins = sorted(found[group], key=lambda plugin: plugin.name)
        groups.append(PluginGroup(group=group, read_by_kernel=read, plugins=plugins, note=note))
    return groups


def inventory_json(groups: list[PluginGroup]) -> dict[str, Any]:
    """The inventory as JSON-ready data (``core-agent plugins --json``)."""
    return {"groups": [asdict(group) for group in groups]}


def _entry_points() -> list[tuple[EntryPoint, str, str]]:
    """``core_agent.*`` entry points with their distribution's name and version.

    A distribution found twice on the path counts once, the first one, as
    ``importlib.metadata.entry_points`` (and so the container) sees it.
    """
    seen: set[str] = set()
    found = []
    for dist in distributions():
        name = dist.metadata["Name"] or "?"
        normalized = re.sub(r"[-_.]+", "-", name).lower()
        if normalized in seen:
            continue
        seen.add(normalized)
        for entry_point in dist.entry_points:
            if entry_point.group.startswith(GROUP_PREFIX):
                found.append((entry_point, name, dist.version or "?"))
    return found


def _check(entry_point: EntryPoint, distribution: str, version: str) -> InstalledPlugin:
    error = None
    try:
        entry_point.load()
    except Exception as exc:  # a third party's import may raise anything: report it
        error = f"{type(exc).__name__}: {exc}"
    return InstalledPlugin(
        name=entry_point.name,
        target=entry_point.value,
        distribution=distribution,
        version=version,
        loads=error is None,
        error=error,
    )


def _kernel_tools() -> list[InstalledPlugin]:
    """The kernel's own tools (memory, knowledge search): always there, no entry point."""
    from core_agent import __version__

    def unopened() -> Any:
        raise UsageError("listing tools opens no store")

    # Defaults, not the environment: the names do not depend on settings, and a listing
    # must work even when the environment holds a bad AGENT_* variable.
    tools = build_kernel_tools(AgentSettings.model_construct(), unopened, unopened)
    return [
        InstalledPlugin(
            name=tool.spec.name,
            target="kernel",
            distribution=KERNEL_DISTRIBUTION,
            version=__version__,
            loads=True,
        )
        for tool in tools
    ]
