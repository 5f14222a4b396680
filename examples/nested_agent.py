"""Nested agents: an agent calls an agent as a tool, which calls another; one event stream.

Run it:   python examples/nested_agent.py
Offline, the shipped scripted model plays each agent from the script below (matched on each
task's text). For a real model set one variable, e.g. AGENT_MODEL=ollama/llama3.2.
Each call of an agent runs it as a child task (its own events, spans, approvals); the root's
stream carries them all, with their depth. A risky call deep down reaches this host's callback.
"""

import json
import tempfile
from pathlib import Path

import anyio

from core_agent import Agent, AgentSettings, create_kernel, tool
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, TaskRequest


@tool(capabilities={"exec"})  # the shipped policy grades it high: a human decides
def restart_service(name: str) -> str:
    """Restart a service.

    Args:
        name: The service.
    """
    return f"{name} restarted"


def approve(request: ApprovalRequest) -> ApprovalDecision:
    print(f"  host asked about {request.tool_call.name if request.tool_call else '?'} -> yes")
    return ApprovalDecision(request_id=request.request_id, approved=True)


script = Path(tempfile.mkdtemp()) / "nested.json"
script.write_text(json.dumps({"conversations": [
    {"match": "^The site is down", "turns": [
        {"tool_calls": [{"name": "triage", "arguments": {"task": "Find why the site is down"}}]},
        {"content": "Fixed: the web service was restarted."}]},
    {"match": "^Find why", "turns": [
        {"tool_calls": [{"name": "operator", "arguments": {"task": "Restart web"}}]},
        {"content": "The web service had hung; it is restarted."}]},
    {"match": "^Restart web", "turns": [
        {"tool_calls": [{"name": "restart_service", "arguments": {"name": "web"}}]},
        {"content": "web restarted"}]},
]}))  # fmt: skip


async def main() -> None:
    settings = AgentSettings(scripted_model_script=script)
    async with create_kernel(settings, tools=[restart_service], approval_callback=approve) as k:
        k.agent_as_tool(Agent("operator", "Runs operations.", tools=("restart_service",)))
        k.agent_as_tool(Agent("triage", "Finds causes of outages.", tools=("operator",)))
        request = TaskRequest(task="The site is down. Fix it.", tools=("triage",))
        async for event in k.stream_task(request):
            if event.kind == "llm.delta":
                continue  # the answers' text as it streams
            detail = getattr(event, "agent", "") or getattr(event, "output", "")
            print(f"{'    ' * event.depth}[{event.depth}] {event.kind} {detail}".rstrip())


anyio.run(main)
