"""A team: five reviewers work on one task, at most two at once; an agent combines them.

Run it:   python examples/team.py
Offline, the shipped scripted model plays each agent from the script below; one reviewer's
"model" fails on purpose: the team still answers, with that failure reported. For a real
model set one variable, e.g. AGENT_MODEL=ollama/llama3.2.
"""

import json
import tempfile
from pathlib import Path

import anyio

from core_agent import Agent, AgentSettings, Team, create_kernel

ANGLES = ["security", "speed", "style", "tests", "docs"]
conversations = [  # each reviewer's task starts "Review for <angle>" (its task_template)
    {"match": f"^Review for {angle}", "turns": [{"content": f"{angle}: looks fine"}]}
    for angle in ANGLES if angle != "tests"
] + [
    {"match": "^Review for tests", "turns": [{"error": {"message": "overloaded"}}]},
    {"match": "^Task given to the team", "turns": [  # the editor, handed every review
        {"content": "Ship it: four reviews are fine; the tests review is missing."}]},
]  # fmt: skip
script = Path(tempfile.mkdtemp()) / "team.json"
script.write_text(json.dumps({"conversations": conversations}))

reviewers = [
    Agent(angle, f"Reviews for {angle}.", tools=(), task_template=f"Review for {angle}: {{task}}")
    for angle in ANGLES
]
editor = Agent("editor", "Combines reviews into one verdict.", tools=())
team = Team("reviewers", "Reviews a change.", reviewers, aggregate=editor, max_concurrent=2)


async def main() -> None:
    settings = AgentSettings(scripted_model_script=script, model_max_retries=0)
    async with create_kernel(settings) as kernel:
        result = await kernel.run_team(team, "the change to the login page")
        for task in sorted(await kernel.list_tasks(), key=lambda t: t.created_at):
            if task.request.parent is not None:  # the members' and the editor's child tasks
                name, answer = task.request.parent.agent, task.output or task.error
                print(f"  {name:<9} {task.status.value:<9} {answer}")
        print(f"team {result.status.value}: {result.output}")


anyio.run(main)
