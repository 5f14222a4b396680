"""One registry from tools of several origins: the host's code, installed packages, the kernel.

A name two of them share is a mistake the host must hear about, naming both, never a silent
override: the model would be offered one of them and the other would never run.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence

from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.tool import ITool
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry


def defined_at(tool: ITool) -> str:
    """Where a tool's code is: ``module.function`` for ``@tool``, else ``module.Class``."""
    # @tool copies its function's names onto the tool (functools.update_wrapper).
    module = getattr(tool, "__module__", type(tool).__module__)
    return f"{module}.{getattr(tool, '__qualname__', type(tool).__qualname__)}"


def host_tools(tools: Iterable[object]) -> tuple[ITool, ...]:
    """The tools a host passes in code (``create_kernel(tools=...)``), each checked to be one.

    Raises:
        TypeError: ``tools`` is not a list of tools, or an item is not an ``ITool`` (a plain
            function is told to take ``@tool``).
    """
    if isinstance(tools, ITool | str | bytes) or not isinstance(tools, Iterable):
        raise TypeError(
            f"tools= takes a list of tools, not {type(tools).__name__}: "
            "for example create_kernel(tools=[my_tool])"
        )
    checked: list[ITool] = []
    for index, item in enumerate(tools):
        if isinstance(item, ITool):
            checked.append(item)
        elif inspect.isroutine(item):
            raise TypeError(
                f"tools[{index}] is the plain function {item.__qualname__!r}: decorate it "
                "with @tool (from core_agent import tool) so it gets a schema and a description"
            )
        elif isinstance(item, type) and issubclass(item, ITool):
            raise TypeError(
                f"tools[{index}] is the class {item.__qualname__!r}: pass an instance of it"
            )
        else:
            raise TypeError(
                f"tools[{index}] ({type(item).__name__}) is not a tool: pass @tool functions "
                "or ITool objects"
            )
    return tuple(checked)


def check_deps(tools: Sequence[ITool], deps: object) -> None:
    """Refuse ``deps`` when an ``@tool`` function's ``ToolContext[...]`` asks for another type.

    Raises:
        ConfigurationError: Naming the tool, the type it asks for and what was given.
    """
    for tool in tools:
        mismatch = tool.deps_mismatch(deps) if isinstance(tool, FunctionTool) else None
        if mismatch is not None:
            raise ConfigurationError(mismatch)


def registry_of(tools: Iterable[tuple[ITool, str]]) -> ToolRegistry:
    """A registry of ``(tool, where it comes from)`` pairs whose names must all differ.

    Raises:
        ConfigurationError: Two tools have the same name; the message says where each comes
            from and how to keep both.
        ToolRegistrationError: A tool's name or schema is invalid.
    """
    origins: dict[str, str] = {}
    kept: list[ITool] = []
    for tool, origin in tools:
        name = tool.spec.name
        if name in origins:
            raise ConfigurationError(
                f"two tools are named {name!r}: {origins[name]} and {origin}; rename one "
                "(@tool(name=...)), or leave an installed or kernel tool out with AGENT_TOOLS"
            )
        origins[name] = origin
        kept.append(tool)
    return ToolRegistry(kept)
