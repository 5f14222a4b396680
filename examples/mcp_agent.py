"""An agent whose tools come from an MCP server: `mcp-server-time`, started over stdio.

Run it:   pip install mcp-server-time && python examples/mcp_agent.py
A server is declared by name (a command, or a `url` for streamable HTTP) in the settings, as
AGENT_MCP_SERVERS (JSON) or in the TOML file AGENT_MCP_FILE names. It starts when the first
task lists the tools, its tools are named `<server>__<tool>`, and it stops with the kernel.
`capabilities` is what you vouch its tools do: without it, every call needs your approval.
Offline, the scripted model plays the model from the script below. For a real model set one
variable, e.g. AGENT_MODEL=ollama/llama3.2: it then decides the calls itself.
"""

import json
import sys
import tempfile
from pathlib import Path

import anyio

from core_agent import AgentSettings, create_kernel
from shared.agent_protocol import PolicyDecided, TaskRequest, ToolCompleted, ToolStarted

servers = {
    "time": {
        "command": sys.executable,  # or "mcp-server-time", or "uvx" with args
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "capabilities": ["read"],  # it only reads the clock: low risk, no approval
    }
}

script = Path(tempfile.mkdtemp()) / "mcp_agent.json"
script.write_text(json.dumps([
    {"tool_calls": [{"name": "time__convert_time", "arguments": {
        "source_timezone": "Asia/Tokyo", "time": "09:00", "target_timezone": "Asia/Kolkata"}}]},
    {"content": "A 09:00 meeting in Tokyo is at 05:30 in Kolkata."},
]))  # fmt: skip


async def main() -> None:
    settings = AgentSettings(mcp_servers=servers, scripted_model_script=script)
    async with create_kernel(settings) as kernel:
        task = "My meeting is at 09:00 in Tokyo. What time is that in Kolkata?"
        result = await kernel.execute_task(TaskRequest(task=task))
        for event in await kernel.task_events(result.task_id):
            if isinstance(event, ToolStarted):
                print(f"→ {event.tool_call.name}({event.tool_call.arguments})")
            elif isinstance(event, PolicyDecided):
                print(f"  policy: {event.risk.value} risk ({event.rule})")
            elif isinstance(event, ToolCompleted):
                target = json.loads(event.result.content)["target"]
                print(f"← {target['timezone']} {target['datetime'][11:16]}", end="")
                print(" (untrusted data for the model)" if event.untrusted else "")
        print(f"{result.status.value}: {result.output}")
    print("the server was stopped with the kernel")


anyio.run(main)
