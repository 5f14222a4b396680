"""A supervisor: an agent hands sub-tasks to named specialists and combines their answers.

Run it:   python examples/supervisor.py
Offline, the shipped scripted model plays each agent from the script below. For a real model
set one variable, e.g. AGENT_MODEL=ollama/llama3.2. Each specialist runs as a child task of
the supervisor's; every handoff is an `agent.handoff` event naming the specialist and the
sub-task, and the child's task links to the supervisor's call.
"""

import json
import tempfile
from pathlib import Path

import anyio

from core_agent import Agent, AgentSettings, create_kernel
from shared.agent_protocol import AgentHandoff

script = Path(tempfile.mkdtemp()) / "supervisor.json"
script.write_text(json.dumps({"conversations": [
    {"match": "^Plan a trip", "turns": [
        {"tool_calls": [{"name": "weather", "arguments": {"task": "Weather in Lisbon in May?"}},
                        {"name": "budget", "arguments": {"task": "Cost of 3 nights in Lisbon?"}}]},
        {"content": "Go in May: sunny, 22°C; about 450 EUR for 3 nights."}]},
    {"match": "^Weather", "turns": [{"content": "Sunny, 22°C"}]},
    {"match": "^Cost", "turns": [{"content": "About 450 EUR"}]},
]}))  # fmt: skip

specialists = [
    Agent("weather", "Knows the climate of cities, month by month.", tools=()),
    Agent("budget", "Estimates travel costs.", tools=()),
]


async def main() -> None:
    async with create_kernel(AgentSettings(scripted_model_script=script)) as kernel:
        lead = kernel.supervisor(Agent("planner", "Plans trips.", tools=()), specialists)
        result = await kernel.run_agent(lead, "Plan a trip to Lisbon")
        for event in await kernel.task_events(result.task_id):
            if isinstance(event, AgentHandoff):
                child = await kernel.get_task(event.child_task_id)
                print(f"handoff to {event.agent}: {event.sub_task!r} -> {child.output}")
        print(f"{result.status.value}: {result.output}")


anyio.run(main)
