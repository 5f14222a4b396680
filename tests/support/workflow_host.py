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


async def main() -> None:
    from core_agent import create_kernel
    from core_agent.workflows import run_workflow

    os.environ["WORKFLOW_BLOCK"] = "1"
    os.environ["WORKFLOW_TASK_ID"] = "wf-crash"
    async with create_kernel() as kernel:
        await run_workflow(kernel, WORKFLOW, Trail(), task_id="wf-crash")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
