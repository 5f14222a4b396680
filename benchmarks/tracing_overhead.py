"""Tracing overhead per ReAct step: the step benchmark with tracing on (content too) and off.

The step is ``react_step_overhead``'s: a scripted model in process asks for ``record(n=i)``
with different arguments each step, the tool runs, SQLite task, trace and checkpoint stores
and the tool-call ledger are on. Three kernels, each with its own database, differ only in
what is traced: ``AGENT_TRACING`` off (no span is written), on without content
(``AGENT_TRACE_CONTENT=false``), and on with content, the default (every step writes its
``llm``, ``tool`` and ``policy`` spans with the prompt's new messages, the answer, the
arguments and the result). Their tasks take turns, the order rotated every round, so all
see the same machine. Steps are timed between consecutive ``tool.completed`` events; the
process's CPU time per step (the database's threads included) is measured over whole tasks.
After each task its events and ledger are checked (every step a successful call with its own
result), and its spans: with tracing on, one tree under the task's root, with the content of
every step when content is on and none when it is off; with tracing off, no span.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import tempfile
import time
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
from core_agent import tool
from core_agent.contracts.trace_store import CONTENT_ATTRIBUTES
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, ToolCompleted

TARGET_RATIO = 1.03
RECORDED: list[int] = []


@tool
async def record(n: int) -> str:
    """Record a number.

    Args:
        n: The number to record.
    """
    RECORDED.append(n)
    return f"recorded {n}"


class Side:
    """One kernel of the comparison, its samples and how to check its tasks."""

    def __init__(
        self,
        name: str,
        data_dir: Path,
        steps: int,
        *,
        spans: bool,
        content: bool,
        stores: str = "sqlite",
    ):
        self.name = name
        self.steps = steps
        self.spans = spans
        self.content = content
        container = kernel_container(stores)
        container.settings.override(
            durable_settings(data_dir, max_turns=steps + 1, tracing=spans, trace_content=content)
        )
        container.tool_registry.override(ToolRegistry([record]))
        script = [
            ScriptedTurn(tool_calls=[ScriptedToolCall(name="record", arguments={"n": n})])
            for n in range(1, steps + 1)
        ]
        container.llm_gateway.override(ScriptedLLMGateway([*script, ScriptedTurn(content="done")]))
        self.ledger = container.tool_call_ledger()
        self.kernel: Any = container.kernel()
        self.marks: list[float] = []
        self.samples: list[float] = []
        self.cpu_s = 0.0
        self.kernel.event_bus.subscribe(
            ToolCompleted, lambda _event: self.marks.append(time.perf_counter())
        )

    async def one_task(self) -> None:
        self.marks.clear()
        RECORDED.clear()
        cpu = time.process_time()
        result = await self.kernel.execute_task(TaskRequest(task="benchmark", force_mode="react"))
        self.cpu_s += time.process_time() - cpu
        assert result.status.value == "succeeded", result.error
        self.samples.extend((b - a) * 1000.0 for a, b in itertools.pairwise(self.marks))
        await self.verify(result)

    async def verify(self, result: Any) -> None:
        steps = self.steps
        await check_tool_steps(
            self.kernel,
            result.task_id,
            steps,
            ledger=self.ledger,
            contents=[f"recorded {n}" for n in range(1, steps + 1)],
        )
        assert list(range(1, steps + 1)) == RECORDED, RECORDED
        spans = await self.kernel.task_spans(result.task_id)
        if not self.spans:
            assert spans == [], f"{len(spans)} spans written with tracing off"
            return
        ids = {span.span_id for span in spans}
        roots = [span for span in spans if span.parent_span_id is None]
        assert [root.kind for root in roots] == ["task"], roots
        assert all(span.parent_span_id in ids for span in spans if span not in roots)
        tools = [span for span in spans if span.kind == "tool"]
        llm = [span for span in spans if span.kind == "llm"]
        assert len(tools) == steps, len(tools)
        assert len(llm) == steps + 1, len(llm)
        if not self.content:
            assert not any(CONTENT_ATTRIBUTES & set(span.attributes) for span in spans)
            return
        assert [span.attributes["result"] for span in tools] == [
            f"recorded {n}" for n in range(1, steps + 1)
        ]
        assert all(
            "input_messages" in s.attributes and "output_message" in s.attributes for s in llm
        )


async def measure(rounds: int, steps: int, directory: Path, stores: str = "sqlite") -> list[Side]:
    sides = [
        Side("off", directory / "off", steps, spans=False, content=False, stores=stores),
        Side("spans", directory / "spans", steps, spans=True, content=False, stores=stores),
        Side("content", directory / "content", steps, spans=True, content=True, stores=stores),
    ]
    async with sides[0].kernel, sides[1].kernel, sides[2].kernel:
        for side in sides:  # warm-up: imports, caches, the WAL files
            for _ in range(3):
                await side.one_task()
            side.samples.clear()
            side.cpu_s = 0.0
        for number in range(rounds):
            turn = number % len(sides)
            for side in sides[turn:] + sides[:turn]:
                gc.collect()  # a collection lands in no side's steps more than another's
                await side.one_task()
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=60, help="tasks per kernel")
    parser.add_argument("--steps", type=int, default=20)
    add_stores_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        off, spans, content = anyio.run(measure, args.rounds, args.steps, Path(tmp), args.stores)
    stats = {side.name: summary(side.samples) for side in (off, spans, content)}
    cpu_ms = {
        side.name: side.cpu_s * 1000.0 / (args.rounds * args.steps)
        for side in (off, spans, content)
    }
    ratios = {
        name: {
            "p50": stats[name]["p50_ms"] / stats["off"]["p50_ms"],
            "p95": stats[name]["p95_ms"] / stats["off"]["p95_ms"],
            "cpu": cpu_ms[name] / cpu_ms["off"],
        }
        for name in ("spans", "content")
    }
    print(
        json.dumps(
            {
                "benchmark": "tracing_overhead",
                "steps": stats,
                "cpu_ms_per_step": cpu_ms,
                "ratio_to_off": ratios,
                "stores": args.stores,
                "target_ratio": TARGET_RATIO,
            }
        )
    )
    print(f"every step a successful record(n=i) call, checked; {stores_note(args.stores)}")
    labels = {
        "off": "tracing off",
        "spans": "tracing on, content off",
        "content": "tracing on, content on",
    }
    for name, label in labels.items():
        numbers = stats[name]
        print(
            f"{label}: {int(numbers['n'])} steps, p50 {numbers['p50_ms']:.3f} ms, "
            f"p95 {numbers['p95_ms']:.3f} ms, p99 {numbers['p99_ms']:.3f} ms; "
            f"CPU {cpu_ms[name]:.3f} ms per step (whole tasks)"
        )
    for name in ("spans", "content"):
        ratio = ratios[name]
        verdict = "meets" if max(ratio["p50"], ratio["p95"]) < TARGET_RATIO else "MISSES"
        print(
            f"{labels[name]} / off: p50 {ratio['p50']:.3f}, p95 {ratio['p95']:.3f}, "
            f"CPU {ratio['cpu']:.3f} ({verdict} the < 3% overhead target)"
        )


if __name__ == "__main__":
    main()
