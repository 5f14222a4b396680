"""core-agent: a hexagonal, local-first agent kernel.

``import core_agent`` is cheap: the public names below load on first use, and no model
library (litellm), vector library or tokenizer is imported until a task needs it.

    from core_agent import create_kernel, tool
    from shared.agent_protocol import TaskRequest

    async with create_kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="What is 6 * 7?"))
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core_agent.agent_files import AgentDefinition, AgentFileError, load_agent_file
    from core_agent.container import KernelContainer, create_kernel, create_sync_kernel
    from core_agent.contracts.settings import AgentSettings
    from core_agent.contracts.tool import ToolContext
    from core_agent.contracts.tool_hook import HookVerdict, ToolHook, tool_hook
    from core_agent.kernel.agent_kernel import AgentKernel
    from core_agent.kernel.agent_teams import MemberResult, Team
    from core_agent.kernel.nested_agents import Agent
    from core_agent.kernel.sync_kernel import EventStream, SyncKernel, TaskHandle
    from core_agent.tooling.function_tool import FunctionTool, tool

__version__ = "0.1.0"

_LAZY = {
    "Agent": "core_agent.kernel.nested_agents",
    "MemberResult": "core_agent.kernel.agent_teams",
    "Team": "core_agent.kernel.agent_teams",
    "AgentDefinition": "core_agent.agent_files",
    "AgentFileError": "core_agent.agent_files",
    "AgentKernel": "core_agent.kernel.agent_kernel",
    "AgentSettings": "core_agent.contracts.settings",
    "FunctionTool": "core_agent.tooling.function_tool",
    "HookVerdict": "core_agent.contracts.tool_hook",
    "KernelContainer": "core_agent.container",
    "create_kernel": "core_agent.container",
    "ToolContext": "core_agent.contracts.tool",
    "load_agent_file": "core_agent.agent_files",
    "create_sync_kernel": "core_agent.container",
    "EventStream": "core_agent.kernel.sync_kernel",
    "SyncKernel": "core_agent.kernel.sync_kernel",
    "TaskHandle": "core_agent.kernel.sync_kernel",
    "ToolHook": "core_agent.contracts.tool_hook",
    "tool": "core_agent.tooling.function_tool",
    "tool_hook": "core_agent.contracts.tool_hook",
}

__all__ = [
    "Agent",
    "AgentDefinition",
    "AgentFileError",
    "AgentKernel",
    "AgentSettings",
    "EventStream",
    "FunctionTool",
    "HookVerdict",
    "KernelContainer",
    "MemberResult",
    "SyncKernel",
    "TaskHandle",
    "Team",
    "ToolContext",
    "ToolHook",
    "__version__",
    "create_kernel",
    "create_sync_kernel",
    "load_agent_file",
    "tool",
    "tool_hook",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'core_agent' has no attribute {name!r}")
