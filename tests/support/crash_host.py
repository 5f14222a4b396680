"""A host process for crash tests: runs multi-step tasks whose tool records its effects.

    python -m support.crash_host CONFIG_JSON

The config names the data directory, the effects file, how many tasks and steps, the
strategy, and optionally a step at which the tool kills its own process (SIGKILL) right
after its effect (a deterministic crash inside a tool), and a time the tool goes on working
after each effect (``effect_delay_s``, so that a kill may land inside it). The model is
scripted (``policy``): a ReAct task records ``steps`` effects, one per turn, then answers; a
plan-and-execute task plans two steps (``a``, then ``b``) that record ``steps`` effects
between them.

With ``approval_risk`` (``"low"``) every effect needs a human's approval, which a host with
``approve_all`` gives at once through its approval callback (recovery kernels have none). A
host with ``resolve_pending`` starts no task: it approves what waits for a human and carries
those tasks on.

The effect tool appends ``task step key`` to the effects file. With ``dedupe`` it first
looks for its idempotency key there (as a service that deduplicates requests would) and is
declared idempotent; without, it is not idempotent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from core_agent.container import KernelContainer
from core_agent.contracts.tool import ToolContext
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ApprovalDecision,
    ChatMessage,
    RiskLevel,
    TaskRequest,
    ToolMessage,
)

PLAN = json.dumps(
    {
        "steps": [
            {"id": "a", "goal": "record the first effects", "depends_on": []},
            {"id": "b", "goal": "record the last effects", "depends_on": ["a"]},
        ]
    }
)


def policy_for(steps: int):  # type: ignore[no-untyped-def]
    def policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        opening = next((m.content for m in messages if m.kind == "user"), "") or ""
        done = sum(1 for m in messages if isinstance(m, ToolMessage) and not m.is_error)
        if opening.startswith("Plan this task:"):
            return ScriptedTurn(content=PLAN)
        if opening.startswith("Write the final answer"):
            return ScriptedTurn(content="all effects recorded")
        step = re.match(r"Your step \((\w+)\)", opening)
        label, wanted = (step.group(1), steps // 2) if step else ("r", steps)
        if step and label == "b":
            wanted = steps - steps // 2
        if done < wanted:
            call = ScriptedToolCall(name="effect", arguments={"step": f"{label}{done + 1}"})
            return ScriptedTurn(tool_calls=[call])
        return ScriptedTurn(content=f"{label} done")

    return policy


def effect_tool(
    effects: Path, dedupe: bool, crash_at: str | None, delay_s: float = 0.0
) -> FunctionTool:
    def effect(step: str, context: ToolContext) -> str:
        """Record one effect of the task.

        Args:
            step: Which step this effect belongs to.
        """
        key = context.idempotency_key or ""
        if dedupe and effects.exists() and f" {key}\n" in effects.read_text():
            return f"effect {step} already recorded"
        with effects.open("a") as handle:
            handle.write(f"{context.task_id} {step} {key}\n")
            handle.flush()
            os.fsync(handle.fileno())
        if crash_at is not None and step == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(delay_s)  # work after the effect: a kill may land here
        return f"effect {step} recorded"

    return FunctionTool(effect, idempotent=dedupe)


def kernel_for(config: dict[str, Any]):  # type: ignore[no-untyped-def]
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": Path(config["data_dir"]),
                "workspace_roots": (Path(config["data_dir"]).parent,),
                "task_lease_s": config.get("lease_s", 2.0),
                "cancel_check_s": 0.2,
                "recovery": config.get("recovery", "off"),
                "max_turns": config["steps"] + 3,
                "plan_step_max_turns": config["steps"] + 3,
                # With ``approval_risk``, every effect needs a human's approval first.
                **(
                    {"policy_approval_required_risk": RiskLevel(config["approval_risk"])}
                    if config.get("approval_risk")
                    else {}
                ),
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=policy_for(config["steps"])))
    container.tool_registry.override(
        ToolRegistry(
            [
                effect_tool(
                    Path(config["effects"]),
                    config.get("dedupe", True),
                    config.get("crash_at"),
                    config.get("effect_delay_s", 0.0),
                )
            ]
        )
    )
    return container.kernel()


async def main(config: dict[str, Any]) -> None:
    kernel = kernel_for(config)
    if config.get("approve_all"):
        # A host whose human approves every request at once (through the callback).
        kernel.set_approval_callback(
            lambda request: ApprovalDecision(request_id=request.request_id, approved=True)
        )
    async with kernel:
        if config.get("resolve_pending"):
            # A human approves what waits (a call to run again): the tasks carry on here.
            for request in await kernel.pending_approvals():
                await kernel.resolve_approval(
                    request.request_id,
                    ApprovalDecision(request_id=request.request_id, approved=True),
                )
            return

        async def one(number: int) -> None:
            await kernel.execute_task(
                TaskRequest(task=f"task {number}", force_mode=config["strategy"])
            )

        async with anyio.create_task_group() as group:
            for number in range(config["tasks"]):
                group.start_soon(one, number)


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
