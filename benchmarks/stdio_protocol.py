"""The stdio protocol: round trips, event notification latency, many tasks on one connection.

The server is a real child process (``core-agent serve --stdio``, as ``python -m
core_agent.cli``) on a temporary data directory, with the shipped scripted demo model and
the default stores; the client is this process, writing lines to the server's stdin and
reading its stdout with blocking calls on the main thread. Three parts:

* ``ping``: round trip of a no-op request (``ping``), sequential, after a warm-up: the time
  from writing the request to having read its response.
* ``events``: for every ``task/event`` of 100 tasks run one after another ("What time is
  it?": two model calls and a ``current_time`` call, 15 events each), the time from the
  kernel publishing the event to the client having read its line. The server is this module
  run with ``--serve-with-stamps``: ``serve_stdio`` as the command runs it, plus one event
  subscriber, registered before the server's, that notes ``CLOCK_MONOTONIC`` (a clock all
  processes of the machine share) for each event id; the client notes the same clock when
  a line is read. Each task is checked from its notifications: a successful
  ``current_time`` call, an answer that reports it, and its events numbered 1, 2, 3...
  with none missing.
* ``concurrent``: 100 ``execute_task`` requests written at once (one write), until their
  100 ``task/result`` notifications, in 5 rounds; between them, the same 100 tasks run in
  process (``kernel.execute_task`` in a task group, same settings, its own data directory).
  Reported: the median wall time of each and their ratio (stdio / in process), and each
  task's time from the write to its result. Every task must succeed with its tool call,
  over stdio and in process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import IO, Any

from benchmarks.stats import summary

ROOT = Path(__file__).resolve().parents[1]
TARGET_PING_P95_MS = 2.0
TARGET_EVENT_P95_MS = 5.0
TASK = "What time is it?"


def now_ms() -> float:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e6


class Server:
    """A server process and a blocking line client on its pipes."""

    def __init__(self, command: list[str], data_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
        env["AGENT_DATA_DIR"] = str(data_dir)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.stdin: IO[bytes] = self.process.stdin
        self.stdout: IO[bytes] = self.process.stdout
        self.next_id = 1

    def write(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    def request_line(self, method: str, params: dict[str, Any] | None = None) -> bytes:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.next_id += 1
        return json.dumps(message).encode() + b"\n"

    def read(self) -> tuple[float, dict[str, Any]]:
        line = self.stdout.readline()
        at = now_ms()
        if not line:
            raise RuntimeError("the server closed its output")
        return at, json.loads(line)

    def close(self) -> int:
        self.stdin.close()
        code = self.process.wait(timeout=120)
        self.stdout.close()
        return code


def cli_command() -> list[str]:
    return [sys.executable, "-m", "core_agent.cli", "serve", "--stdio"]


def bench_ping(data_dir: Path, count: int) -> dict[str, Any]:
    server = Server(cli_command(), data_dir)
    samples: list[float] = []
    for n in range(count + 200):
        line = server.request_line("ping")
        start = now_ms()
        server.write(line)
        _, message = server.read()
        elapsed = now_ms() - start
        assert message.get("result") == {}, message
        if n >= 200:  # the first ones warm up
            samples.append(elapsed)
    assert server.close() == 0
    return {"part": "ping", **summary(samples), "target_p95_ms": TARGET_PING_P95_MS}


def run_until_results(
    server: Server, lines: list[bytes]
) -> tuple[float, dict[str, float], list[tuple[float, dict[str, Any]]]]:
    """Write ``lines`` (execute_task requests) at once; read until each task has a result.

    Returns when they were written, when each task's result was read, and every line read.
    """
    sent_at = now_ms()
    server.write(b"".join(lines))
    tasks: set[str] = set()
    answered = 0
    results: dict[str, float] = {}
    seen: list[tuple[float, dict[str, Any]]] = []
    while answered < len(lines) or len(results) < len(tasks):
        at, message = server.read()
        seen.append((at, message))
        if "result" in message:
            tasks.add(message["result"]["task_id"])
            answered += 1
        elif "error" in message:
            raise AssertionError(message)
        elif message["method"] == "task/result":
            params = message["params"]
            assert params["status"] == "succeeded", params
            results[params["task_id"]] = at
    return sent_at, results, seen


def check_tasks(seen: list[tuple[float, dict[str, Any]]], tasks: int) -> dict[str, list[str]]:
    """Each task did its work: a successful current_time call, an answer that reports it, and
    an unbroken stream of events. Returns the event kinds of each task."""
    kinds: dict[str, list[str]] = defaultdict(list)
    seqs: dict[str, list[int]] = defaultdict(list)
    outputs: dict[str, str] = {}
    for _, message in seen:
        if message.get("method") != "task/event":
            continue
        event = message["params"]
        kinds[event["task_id"]].append(event["kind"])
        seqs[event["task_id"]].append(event["seq"])
        if event["kind"] == "tool.completed":
            assert event["result"]["name"] == "current_time", event
            assert not event["result"]["is_error"], event
        if event["kind"] == "task.succeeded":
            outputs[event["task_id"]] = event["output"]
    assert len(kinds) == tasks, len(kinds)
    for task_id, numbers in seqs.items():
        assert numbers == list(range(1, len(numbers) + 1)), (task_id, numbers)
        assert kinds[task_id].count("tool.completed") == 1, kinds[task_id]
        assert outputs[task_id].startswith("The current time is"), outputs.get(task_id)
    return kinds


def bench_events(data_dir: Path, tasks: int) -> dict[str, Any]:
    stamps_file = data_dir / "stamps.json"
    command = [sys.executable, "-m", "benchmarks.stdio_protocol"]
    server = Server([*command, "--serve-with-stamps", str(stamps_file)], data_dir)
    seen: list[tuple[float, dict[str, Any]]] = []
    for n in range(tasks + 5):
        _, _, lines = run_until_results(
            server, [server.request_line("execute_task", {"task": TASK})]
        )
        if n >= 5:  # the first ones warm up
            seen += lines
    assert server.close() == 0
    kinds = check_tasks(seen, tasks)
    published: dict[str, float] = json.loads(stamps_file.read_text())
    samples = [
        at - published[message["params"]["event_id"]]
        for at, message in seen
        if message.get("method") == "task/event"
    ]
    events = sum(len(k) for k in kinds.values())
    assert len(samples) == events
    return {
        "part": "events",
        "tasks": tasks,
        "events": events,
        "events_per_task": events / tasks,
        **summary(samples),
        "target_p95_ms": TARGET_EVENT_P95_MS,
    }


def bench_concurrent(data_dir: Path, tasks: int, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of ``tasks`` at once, over stdio and in process, alternately."""
    import anyio
    import anyio.to_thread

    from core_agent.container import create_kernel
    from core_agent.contracts.settings import AgentSettings
    from shared.agent_protocol import TaskRequest, TaskStatus

    server = Server(cli_command(), data_dir / "stdio")
    per_task: list[float] = []

    def over_stdio(count: int) -> float:
        lines = [server.request_line("execute_task", {"task": TASK}) for _ in range(count)]
        sent_at, results, seen = run_until_results(server, lines)
        check_tasks(seen, count)
        per_task.extend(at - sent_at for at in results.values())
        return max(results.values()) - sent_at

    async def measure() -> tuple[list[float], list[float]]:
        kernel = create_kernel(AgentSettings(data_dir=data_dir / "in_process"))
        request = TaskRequest(task=TASK)

        async def in_process(count: int) -> float:
            results: list[Any] = []

            async def one() -> None:
                results.append(await kernel.execute_task(request))

            start = now_ms()
            async with anyio.create_task_group() as group:
                for _ in range(count):
                    group.start_soon(one)
            wall = now_ms() - start
            assert len(results) == count
            assert all(r.status is TaskStatus.SUCCEEDED for r in results), results[:3]
            return wall

        stdio_walls: list[float] = []
        local_walls: list[float] = []
        async with kernel:
            # Warm-up: imports, the databases' files, the first model calls.
            await anyio.to_thread.run_sync(over_stdio, 5)
            await in_process(5)
            per_task.clear()
            for _ in range(rounds):  # alternately, so that both see the same machine
                stdio_walls.append(await anyio.to_thread.run_sync(over_stdio, tasks))
                local_walls.append(await in_process(tasks))
        return stdio_walls, local_walls

    stdio_walls, local_walls = anyio.run(measure)
    assert server.close() == 0
    stdio_ms, local_ms = statistics.median(stdio_walls), statistics.median(local_walls)
    return {
        "part": "concurrent",
        "tasks": tasks,
        "rounds": rounds,
        "succeeded": len(per_task),
        "wall_ms_median": stdio_ms,
        "wall_ms": stdio_walls,
        "per_task": summary(per_task),
        "in_process_wall_ms_median": local_ms,
        "in_process_wall_ms": local_walls,
        "ratio_stdio_to_in_process": stdio_ms / local_ms,
    }


def serve_with_stamps(stamps_file: Path) -> None:
    """``core-agent serve --stdio``, noting when the kernel publishes each event."""
    import anyio
    from pydantic import BaseModel

    from core_agent.container import create_kernel
    from core_agent.stdio_server import serve_stdio

    stamps: dict[str, float] = {}

    def stamp(event: BaseModel) -> None:
        stamps[getattr(event, "event_id", "")] = now_ms()

    kernel = create_kernel()
    kernel.event_bus.subscribe(None, stamp)  # before the server's own subscriber
    anyio.run(serve_stdio, kernel)
    stamps_file.write_text(json.dumps(stamps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=["ping", "events", "concurrent"])
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--event-tasks", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=100, help="tasks at once (concurrent)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of them (concurrent)")
    parser.add_argument("--serve-with-stamps", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_with_stamps:
        serve_with_stamps(args.serve_with_stamps)
        return
    parts = {
        "ping": lambda root: bench_ping(root, args.pings),
        "events": lambda root: bench_events(root, args.event_tasks),
        "concurrent": lambda root: bench_concurrent(root, args.tasks, args.rounds),
    }
    for name, part in parts.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            report = part(Path(tmp))
        print(json.dumps({"benchmark": "stdio_protocol", **report}))
        if name == "ping":
            verdict = "meets" if report["p95_ms"] < TARGET_PING_P95_MS else "MISSES"
            print(
                f"no-op round trip over {int(report['n'])} pings: p50 {report['p50_ms']:.3f} ms, "
                f"p95 {report['p95_ms']:.3f} ms, p99 {report['p99_ms']:.3f} ms ({verdict} the "
                f"p95 < {TARGET_PING_P95_MS:g} ms target)"
            )
        elif name == "events":
            verdict = "meets" if report["p95_ms"] < TARGET_EVENT_P95_MS else "MISSES"
            print(
                f"event published -> line read, {int(report['n'])} events of "
                f"{report['tasks']} tasks: p50 {report['p50_ms']:.3f} ms, p95 "
                f"{report['p95_ms']:.3f} ms, p99 {report['p99_ms']:.3f} ms ({verdict} the "
                f"p95 < {TARGET_EVENT_P95_MS:g} ms target); every task checked"
            )
        else:
            per_task = report["per_task"]
            print(
                f"{report['tasks']} tasks at once over one connection, {report['rounds']} rounds: "
                f"all {report['succeeded']} succeeded; wall median "
                f"{report['wall_ms_median']:.0f} ms, in process "
                f"{report['in_process_wall_ms_median']:.0f} ms, ratio "
                f"{report['ratio_stdio_to_in_process']:.2f}; per task p50 "
                f"{per_task['p50_ms']:.0f} ms, p95 {per_task['p95_ms']:.0f} ms"
            )


if __name__ == "__main__":
    main()
