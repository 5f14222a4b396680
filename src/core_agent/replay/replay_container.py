"""The container a rerun or a fork builds its kernel from: the current configuration.

As ``create_kernel`` wires it (settings, an agent file, the host's tools and deps), with
background recovery off: a replay is a short job that takes over no other task. The caller
overrides what it replays (the model, the tools) before the kernel is built.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from dependency_injector import providers

from core_agent.agent_files import AgentDefinition
from core_agent.container import KernelContainer, use_agent_file
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool
from core_agent.tooling.tool_origins import check_deps, host_tools


def replay_container(
    settings: AgentSettings | None = None,
    *,
    tools: Iterable[ITool] = (),
    deps: object = None,
    agent: AgentDefinition | str | os.PathLike[str] | None = None,
    **changes: Any,
) -> KernelContainer:
    """A container configured as ``create_kernel`` would be, with ``changes`` to the settings.

    ``changes`` are applied after the agent file (they are what the replay needs, such as
    another model), together with ``recovery="off"``.

    Raises:
        AgentFileError: ``agent`` is not a valid agent file.
        TypeError: ``tools`` is not a list of tools.
        ConfigurationError: ``deps`` is not of the type a tool asks for.
    """
    given = host_tools(tools)
    check_deps(given, deps)
    container = KernelContainer()
    container.settings.override(providers.Object(settings or AgentSettings()))
    container.host_tools.override(providers.Object(given))
    container.deps.override(providers.Object(deps))
    use_agent_file(container, agent)
    configured = container.settings().model_copy(update={**changes, "recovery": "off"})
    container.settings.override(providers.Object(configured))
    return container
