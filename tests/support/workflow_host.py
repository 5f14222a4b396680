"""A host that runs a three-layer workflow and blocks in its second layer, to be killed.

Each node appends its name to the file ``WORKFLOW_EFFECTS`` names (its side effect, counted
by the test). Run as a script, it prints ``BLOCKED <task id>`` once the second layer's node
has written its effect and waits forever; imported, it only builds (registers) the workflow.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import BaseModel

from core_agent.workflows import Workflow, append
from shared.agent_protocol import TaskRequest


class Trail(BaseModel):
    log: Annotated[list[str], append] = []


def effect(name: str) -> None:
    with Path(os.environ["WORKFLOW_EFFECTS"]).open("a") as file:
        file.write(f"{name}\n")


async def first(state: Trail) -> dict[str, list[str]]:
    effect("first")
    return {"log": ["first"]}


async def second(state: Trail) -> dict[str, list[str]]:
    effect("second")
    if os.environ.get("WORKFLOW_BLOCK") == "1":
        print(f"BLOCKED {os.environ['WORKFLOW_TASK_ID']}", flush=True)
        await anyio.sleep_forever()
    return {"log": ["second"]}


async def third(state: Trail) -> dict[str, list[str]]:
    effect("third")
    return {"log": ["third"]}


WORKFLOW = (
    Workflow("crash-after-first-layer", Trail)
    .node("first", first)
    .node("second", second)
    .node("third", third)
    .edge("first", "second")
    .edge("second", "third")
    .build()
)


async def begin(state: Trail) -> dict[str, list[str]]:
    effect("begin")
    return {"log": ["begin"]}


_quick_done: list[anyio.Event] = []  # made in main(): an event belongs to a running loop


async def quick(state: Trail) -> dict[str, list[str]]:
    effect("quick")
    for done in _quick_done:
        done.set()
    return {"log": ["quick"]}


async def slow(state: Trail) -> dict[str, list[str]]:
    effect("slow")
    if os.environ.get("WORKFLOW_BLOCK") == "1":
        for done in _quick_done:
            await done.wait()  # its sibling has finished when the process is killed
        print(f"BLOCKED {os.environ['WORKFLOW_TASK_ID']}", flush=True)
        await anyio.sleep_forever()
    return {"log": ["slow"]}


async def close(state: Trail) -> dict[str, list[str]]:
    effect("close")
    return {"log": ["close"]}


PARALLEL = (
    Workflow("crash-mid-parallel-layer", Trail, allow_fan_out=True)
    .node("begin", begin)
    .node("quick", quick)
    .node("slow", slow)
    .node("close", close)
    .edge("begin", "quick")
    .edge("begin", "slow")
    .edge("quick", "close")
    .edge("slow", "close")
    .build()
)
"""Killed in its parallel layer, after ``quick`` finished and while ``slow`` runs."""


async def link(state: Trail) -> dict[str, list[str]]:
    if len(state.log) == 20 and os.environ.get("WORKFLOW_BLOCK") == "1":
        print(f"BLOCKED {os.environ['WORKFLOW_TASK_ID']}", flush=True)  # it runs on
    return {"log": [str(len(state.log))]}


CHAIN = Workflow("crash-anywhere-in-a-chain", Trail)
for _number in range(150):
    CHAIN.node(f"n{_number}", link)
    if _number:
        CHAIN.edge(f"n{_number - 1}", f"n{_number}")
CHAIN.build()
"""150 quick layers, each adding its number to the log (it says BLOCKED in layer 20, and runs
on): killed at any moment after (checkpoint writes included), it resumes to exactly 0..149."""


class Asked(BaseModel):
    log: Annotated[list[str], append] = []
    answer: str = ""


async def after_ask(state: Asked) -> dict[str, list[str]]:
    effect("after_ask")
    if os.environ.get("WORKFLOW_BLOCK") == "1":
        print(f"BLOCKED {os.environ['WORKFLOW_TASK_ID']}", flush=True)
        await anyio.sleep_forever()
    return {"log": [state.answer]}


ASKING = (
    Workflow("crash-after-an-agent-node", Asked)
    .agent("ask", TaskRequest(task="Answer once"), output="answer")
    .node("after_ask", after_ask)
    .edge("ask", "after_ask")
    .build()
)
"""Killed in its second layer, after its agent node's child task succeeded."""


async def main() -> None:
    from core_agent import create_kernel
    from core_agent.workflows import run_workflow

    os.environ["WORKFLOW_BLOCK"] = "1"
    os.environ["WORKFLOW_TASK_ID"] = "wf-crash"
    _quick_done.append(anyio.Event())
    kind = os.environ.get("WORKFLOW_KIND")
    chosen = {"parallel": PARALLEL, "chain": CHAIN}.get(kind or "", WORKFLOW)
    async with create_kernel() as kernel:
        if kind == "agent":
            await run_workflow(kernel, ASKING, Asked(), task_id="wf-crash")
        else:
            await run_workflow(kernel, chosen, Trail(), task_id="wf-crash")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
