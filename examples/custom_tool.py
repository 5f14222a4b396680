"""A tool of your own that works on your application's objects (`deps`).

Run it:   python examples/custom_tool.py
Offline, the shipped scripted model plays the model from the short script below (turn 1 calls
`check_stock`, turn 2 answers). For a real model set one variable, e.g.
AGENT_MODEL=ollama/llama3.2: the model then decides the calls itself and the script is ignored.
"""

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from core_agent import AgentSettings, ToolContext, create_kernel, tool
from shared.agent_protocol import TaskRequest, ToolCompleted, ToolStarted


@dataclass
class Pantry:
    """Your application's state; the kernel hands it to tools and never stores it."""

    stock: dict[str, int] = field(default_factory=lambda: {"oat milk": 2, "coffee": 0})


# No capabilities: it only reads the app's own state. A tool declared {"read"} (files, the
# web...) has its output marked as untrusted data for the model, and taints the task.
@tool(idempotent=True)
def check_stock(ctx: ToolContext[Pantry], item: str) -> str:
    """How many of an item are in the pantry.

    Args:
        ctx: The call's context (not shown to the model); ctx.deps is the Pantry.
        item: The item's name, e.g. "coffee".
    """
    count = ctx.deps.stock.get(item.lower())
    return f"{item}: unknown item" if count is None else f"{item}: {count} left"


script = Path(tempfile.mkdtemp()) / "custom_tool.json"
script.write_text(json.dumps([
    {"tool_calls": [{"name": "check_stock", "arguments": {"item": "coffee"}},
                    {"name": "check_stock", "arguments": {"item": "oat milk"}}]},
    {"content": "You are out of coffee; there is still some oat milk."},
]))  # fmt: skip


async def main() -> None:
    settings = AgentSettings(scripted_model_script=script)  # the rest from AGENT_* variables
    kernel = create_kernel(settings, tools=[check_stock], deps=Pantry())
    async with kernel:
        print("the model sees:", json.dumps(check_stock.spec.parameters))
        result = await kernel.execute_task(TaskRequest(task="Do I need to buy coffee or milk?"))
        for event in await kernel.task_events(result.task_id):  # what happened, as recorded
            if isinstance(event, ToolStarted):
                print(f"→ {event.tool_call.name}({event.tool_call.arguments})")
            elif isinstance(event, ToolCompleted):
                print(f"← {event.result.content}")
        print(f"{result.status.value}: {result.output}")


anyio.run(main)
