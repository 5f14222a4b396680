"""Nested-agent call overhead: a ReAct step calling an agent, over one calling a plain tool.

Two kinds of task take turns in one kernel (SQLite stores, checkpoints and ledger on, scripted
model in process): a *plain* task whose steps each call ``record(n=i)``, and a *nested* task
whose steps each call the agent tool ``helper`` with ``echo i``: every call runs ``helper`` as
a child task (created, routed, one scripted model turn, its checkpoint, its ending, its spans)
and returns its answer. Steps are timed between the parent's consecutive ``tool.completed``
events. The overhead of a nested step is its time less the median plain step. The process's
CPU time per step (all its threads) is printed too: on a shared machine it moves much less
with the load than the wall time does.

Checked after every task, outside the timings: the parent has one successful
``tool.completed`` per step whose content is what the step's child answered; a nested task
has one ``agent.handoff`` per step, each naming a child task that succeeded, is linked to the
parent at depth 1, and answered ``echoed i``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from benchmarks.stats import (
    add_stores_option,
    check_tool_steps,
    durable_settings,
    kernel_container,
    stores_note,
    summary,
)
from core_agent import Agent, tool
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    AgentHandoff,
    ChatMessage,
    TaskRequest,
    TaskStatus,
    ToolCompleted,
    ToolMessage,
    UserMessage,
)

TARGET_P95_MS = 2.0


@tool
async def record(n: int) -> str:
    """Record a number.

    Args:
        n: The number to record.
    """
    return f"echoed {n}"


def model(steps: int) -> ScriptedLLMGateway:
    """Parents call ``record`` or ``helper`` once a step; a child echoes its number."""

    def policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        task = next(m.content for m in messages if isinstance(m, UserMessage))
        if task.startswith("echo "):
            return ScriptedTurn(content=f"echoed {task.removeprefix('echo ')}")
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done == steps:
            return ScriptedTurn(content="done")
        n = done + 1
        if task == "nested":
            call = ScriptedToolCall(name="helper", arguments={"task": f"echo {n}"})
        else:
            call = ScriptedToolCall(name="record", arguments={"n": n})
        return ScriptedTurn(tool_calls=[call])

    return ScriptedLLMGateway(policy=policy)


async def check_nested(kernel: Any, task_id: str, steps: int) -> None:
    """Every step of ``task_id`` handed ``echo i`` to a child task that answered it."""
    handoffs = [e for e in await kernel.task_events(task_id) if isinstance(e, AgentHandoff)]
    assert [h.sub_task for h in handoffs] == [f"echo {n}" for n in range(1, steps + 1)]
    for n, handoff in enumerate(handoffs, start=1):
        child = await kernel.get_task(handoff.child_task_id)
        assert child.status is TaskStatus.SUCCEEDED, child.error
        link = child.request.parent
        assert link is not None, child.task_id
        assert (link.task_id, link.depth, child.output) == (task_id, 1, f"echoed {n}")


async def measure(
    rounds: int, steps: int, data_dir: Path, stores: str = "sqlite"
) -> dict[str, list[float]]:
    container = kernel_container(stores)
    container.settings.override(durable_settings(data_dir, max_turns=steps + 1))
    container.tool_registry.override(ToolRegistry([record]))
    container.llm_gateway.override(model(steps))
    kernel = container.kernel()
    kernel.agent_as_tool(Agent("helper", "Echoes a number.", tools=(), force_mode="react"))
    marks: list[tuple[str, float]] = []
    kernel.event_bus.subscribe(
        ToolCompleted, lambda e: marks.append((e.task_id, time.perf_counter()))
    )
    samples: dict[str, list[float]] = {"plain": [], "nested": [], "plain_cpu": [], "nested_cpu": []}
    contents = [f"echoed {n}" for n in range(1, steps + 1)]
    async with kernel:
        for _ in range(rounds):
            for kind in ("plain", "nested"):
                marks.clear()
                request = TaskRequest(task=kind, force_mode="react", tools=("record", "helper"))
                cpu = time.process_time()
                result = await kernel.execute_task(request)
                samples[f"{kind}_cpu"].append((time.process_time() - cpu) * 1000.0 / steps)
                assert result.status is TaskStatus.SUCCEEDED, result.error
                own = [at for task_id, at in marks if task_id == result.task_id]
                samples[kind].extend((b - a) * 1000.0 for a, b in itertools.pairwise(own))
                await check_tool_steps(kernel, result.task_id, steps, contents=contents)
                if kind == "nested":
                    await check_nested(kernel, result.task_id, steps)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    add_stores_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(measure, 2, args.steps, Path(tmp), args.stores)  # warm-up: imports, caches
        samples = anyio.run(measure, args.rounds, args.steps, Path(tmp), args.stores)
    plain, nested = summary(samples["plain"]), summary(samples["nested"])
    base = statistics.median(samples["plain"])
    overhead = summary([s - base for s in samples["nested"]])
    # The process's CPU time (its threads' too) per step, task by task: what the wall time
    # is made of when the machine is not shared, and much less moved by a load than it.
    cpu_plain = statistics.median(samples["plain_cpu"])
    cpu_nested = statistics.median(samples["nested_cpu"])
    print(
        json.dumps(
            {
                "benchmark": "nested_agent_overhead",
                "plain_step": plain,
                "nested_step": nested,
                "overhead": overhead,
                "cpu_per_step_ms": {"plain": cpu_plain, "nested": cpu_nested},
                "stores": args.stores,
                "target_p95_ms": TARGET_P95_MS,
            }
        )
    )
    print(
        "every nested step checked to run a child task that answered it; "
        + stores_note(args.stores)
    )
    verdict = "meets" if overhead["p95_ms"] < TARGET_P95_MS else "MISSES"
    print(
        f"nested-agent call over {int(overhead['n'])} steps: plain step p50 "
        f"{plain['p50_ms']:.3f} ms, nested step p50 {nested['p50_ms']:.3f} ms / p95 "
        f"{nested['p95_ms']:.3f} ms; overhead p50 {overhead['p50_ms']:.3f} ms, p95 "
        f"{overhead['p95_ms']:.3f} ms ({verdict} the target p95 < {TARGET_P95_MS:g} ms); "
        f"CPU per step (median of tasks): plain {cpu_plain:.3f} ms, nested {cpu_nested:.3f} ms, "
        f"overhead {cpu_nested - cpu_plain:.3f} ms"
    )


if __name__ == "__main__":
    main()
