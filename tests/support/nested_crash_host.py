"""A host whose grandchild task kills the process (SIGKILL) in the middle of a tool call.

Root task -> ``planner`` (child) -> ``worker`` (grandchild); the worker records an effect in a
file, then calls ``block``, which kills the host the first time (``crash`` set). Used by
``tests/integration/test_nested_agent_crash.py``, which recovers in a new kernel.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio

from core_agent.container import KernelContainer
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.kernel.nested_agents import Agent
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import TaskRequest, TokenUsage


def _call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


def _said(text: str) -> ScriptedTurn:
    return ScriptedTurn(content=text, usage=TokenUsage(input_tokens=10, output_tokens=5))


def kernel_on(
    data_dir: Path, *, crash: bool, agents: bool = True, **settings: object
) -> AgentKernel:
    """The kernel of the host (``crash``) or of the process that recovers it.

    Without ``agents``, the worker is not known to it (a host that forgot to register it).
    """
    effects = data_dir / "effects.txt"

    def effect(step: str) -> str:
        """Record an effect (not safe to repeat)."""
        with effects.open("a") as file:
            file.write(f"{step}\n")
        return f"did {step}"

    def block() -> str:
        """Wait for the world; the host dies here."""
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)
        return "unblocked"

    conversations = [
        ScriptedConversation(
            match="^Ship it", turns=[_call("planner", task="Plan it"), _said("Root: shipped.")]
        ),
        ScriptedConversation(
            match="^Plan it", turns=[_call("worker", task="Do it"), _said("Planner: planned.")]
        ),
        ScriptedConversation(
            match="^Do it",
            turns=[_call("effect", step="e1"), _call("block"), _said("Worker: done.")],
        ),
    ]
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": data_dir,
                "workspace_roots": (data_dir,),
                "cancel_check_s": 0.05,
                "recovery": "off",
                **settings,
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations))
    container.tool_registry.override(
        ToolRegistry([FunctionTool(effect), FunctionTool(block, idempotent=True)])
    )
    kernel: AgentKernel = container.kernel()
    if agents:
        kernel.agent_as_tool(Agent("worker", "Does the work.", tools=("effect", "block")))
        kernel.agent_as_tool(Agent("planner", "Plans.", tools=("worker",)))
    return kernel


async def _main(data_dir: Path) -> None:
    async with kernel_on(data_dir, crash=True) as kernel:
        await kernel.execute_task(TaskRequest(task="Ship it", tools=("planner",)), task_id="root")


if __name__ == "__main__":
    anyio.run(_main, Path(sys.argv[1]))
