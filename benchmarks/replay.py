"""Replay of a 200-step task: reading it back from the stores and printing every step.

    python -m benchmarks.replay [--turns N] [--runs R]

The task is built for real through the kernel, in a temporary data directory with the
SQLite stores: the shipped scripted model asks for ``calculator`` with another expression
each turn (``--turns``, default 49), then answers. Each turn is four steps (the model turn,
the call, its policy decision, its result), and the route, the memory recall, the last
model turn and the answer make four more: 200 steps.

Timed, ``--runs`` times each after a warm-up:

* ``in process``: opening the data directory's stores, reading the task, its events and
  spans, building the trajectory and printing it (to a buffer, as a terminal would get it);
  the figure compared with the target;
* ``command``: ``core-agent replay TASK`` as a fresh process, from spawn to exit (Python's
  start and imports included), for scale; next to it ``core-agent --version`` (the
  interpreter and the command line's start) and ``core-agent show TASK`` (the conversation
  view of the same task), run in turn with it.

Every run is checked to have printed all the steps, numbered 1 to 200, ending with the
answer.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks.stats import summary
from core_agent import AgentSettings, create_kernel
from core_agent.replay import TaskRecords
from core_agent.replay.rendering import LABELS, print_trajectory
from shared.agent_protocol import TaskRequest, TaskStatus

TARGET_MS = 1000.0
CLI = str(Path(sys.executable).with_name("core-agent"))


def script(turns: int) -> list[dict[str, object]]:
    calls: list[dict[str, object]] = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{n} * 3"}}]}
        for n in range(1, turns + 1)
    ]
    return [*calls, {"content": "done"}]


async def record_task(settings: AgentSettings, turns: int) -> str:
    kernel = create_kernel(settings)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Add the numbers up."))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    return result.task_id


STEP_LINE = re.compile(r"^ *(\d+) (\S+)")
"""A step's first line: its number, right-aligned, then its label (lines under it are
indented past both)."""
FIRST_WORDS = {label.split()[0] for label in LABELS.values()}


def check_printed(text: str, steps: int) -> None:
    numbers = [
        int(match.group(1))
        for match in map(STEP_LINE.match, text.splitlines())
        if match is not None and match.group(2) in FIRST_WORDS
    ]
    assert numbers == list(range(1, steps + 1)), f"printed steps {numbers[:3]}...{numbers[-3:]}"
    assert f"{steps} answer" in " ".join(text.split()), "the last step is not the answer"


async def in_process(settings: AgentSettings, task_id: str) -> tuple[float, str]:
    from rich.console import Console

    started = time.perf_counter()
    async with TaskRecords(settings) as records:
        trajectory = await records.trajectory(task_id)
    buffer = io.StringIO()
    print_trajectory(Console(file=buffer, width=120, highlight=False), trajectory)
    return (time.perf_counter() - started) * 1000.0, buffer.getvalue()


def command(data_dir: Path, *args: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update({"AGENT_DATA_DIR": str(data_dir), "COLUMNS": "120"})
    started = time.perf_counter()
    done = subprocess.run(
        [CLI, *args], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return (time.perf_counter() - started) * 1000.0, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=49, help="calculator turns (4 steps each)")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    steps = 4 * args.turns + 4
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        script_file = Path(tmp) / "script.json"
        script_file.write_text(json.dumps(script(args.turns)))
        settings = AgentSettings(
            data_dir=data_dir, scripted_model_script=script_file, max_turns=args.turns + 1
        )
        task_id = anyio.run(record_task, settings, args.turns)

        inside: list[float] = []
        for run in range(args.runs + 1):
            elapsed, text = anyio.run(in_process, settings, task_id)
            check_printed(text, steps)
            if run:  # the first is the warm-up
                inside.append(elapsed)
        outside: list[float] = []
        floor: list[float] = []
        show: list[float] = []
        for run in range(min(args.runs, 10) + 1):
            elapsed, text = command(data_dir, "replay", task_id)
            check_printed(text, steps)
            version, _ = command(data_dir, "--version")
            shown, _ = command(data_dir, "show", task_id)
            if run:
                outside.append(elapsed)
                floor.append(version)
                show.append(shown)
    inner, outer = summary(inside), summary(outside)
    print(f"replay of a {steps}-step task ({args.turns} calculator turns), every step printed")
    print(
        f"  in process: p50 {inner['p50_ms']:.1f} ms  p95 {inner['p95_ms']:.1f} ms "
        f"(n={len(inside)})  target < {TARGET_MS:.0f} ms: "
        + ("met" if inner["p95_ms"] < TARGET_MS else "NOT met")
    )
    print(
        f"  command (fresh process, start and imports included): p50 {outer['p50_ms']:.1f} ms  "
        f"p95 {outer['p95_ms']:.1f} ms (n={len(outside)})"
    )
    for name, samples in (("core-agent --version", floor), ("core-agent show", show)):
        print(f"    for scale, {name}: p50 {summary(samples)['p50_ms']:.1f} ms")
    print(f"  load average: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    print(json.dumps({"steps": steps, "in_process": inner, "command": outer}))


if __name__ == "__main__":
    main()
