"""Workflow overhead per node, and a 1,000-node layered workflow's memory.

Per node: a chain of no-op function nodes (each its own layer), so every node pays the whole
bookkeeping of a layer: its started and finished events, its span, the merge, choosing the
next node and the layer's checkpoint (SQLite task, trace and checkpoint stores on). A node is
timed between consecutive ``workflow.node_finished`` events as the event bus publishes them.
Each task is checked afterwards: every node finished once, in order, and the checkpoint says
the run finished after as many layers as nodes, with the state every node updated.

Layered: 100 layers of 10 no-op nodes, each node of a layer after every node of the one
before (10,000 edges), each appending its name through the ``append`` reducer; the run is
checked to have run 100 layers and the 1,000 nodes. Memory is the Python heap's peak during
the run (tracemalloc) and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import BaseModel

from benchmarks.stats import STORES_NOTE, durable_settings, summary
from core_agent import create_kernel
from core_agent.workflows import Workflow, append, run_workflow, workflow_snapshot
from shared.agent_protocol import TaskStatus, WorkflowNodeFinished


class Counter(BaseModel):
    count: int = 0


class Trail(BaseModel):
    done: Annotated[list[str], append] = []


async def tick(state: Counter) -> dict[str, int]:
    return {"count": state.count + 1}


def chain(nodes: int) -> Workflow[Counter]:
    workflow = Workflow("bench-chain", Counter, max_layers=nodes + 1)
    for i in range(nodes):
        workflow.node(f"n{i}", tick)
        if i:
            workflow.edge(f"n{i - 1}", f"n{i}")
    return workflow.build()


def layered(layers: int, width: int) -> Workflow[Trail]:
    workflow = Workflow("bench-layered", Trail, allow_fan_out=True, max_concurrency=width)

    def add_node(name: str) -> None:
        async def mark(state: Trail) -> dict[str, list[str]]:
            return {"done": [name]}

        workflow.node(name, mark)

    add_node("start")
    previous = ["start"]
    for layer in range(layers):
        names = [f"l{layer}n{i}" for i in range(width)]
        for name in names:
            add_node(name)
            for before in previous:
                workflow.edge(before, name)
        previous = names
    return workflow.build()


async def per_node(nodes: int, tasks: int, data_dir: Path) -> list[float]:
    workflow = chain(nodes)
    marks: list[float] = []
    samples: list[float] = []
    async with create_kernel(durable_settings(data_dir)) as kernel:
        kernel.event_bus.subscribe(
            WorkflowNodeFinished, lambda _e: marks.append(time.perf_counter())
        )
        for _ in range(tasks):
            marks.clear()
            result = await run_workflow(kernel, workflow, Counter())
            assert result.status is TaskStatus.SUCCEEDED, result.task.error
            samples.extend((b - a) * 1000.0 for a, b in itertools.pairwise(marks))
            finished = [
                e.node
                for e in await kernel.task_events(result.task_id)
                if isinstance(e, WorkflowNodeFinished)
            ]
            assert finished == [f"n{i}" for i in range(nodes)], "a node is missing or repeated"
            snapshot = await workflow_snapshot(kernel, workflow, result.task_id)
            assert snapshot is not None
            assert snapshot.finished
            assert snapshot.layers == nodes
            assert snapshot.state.count == nodes
            assert result.state == snapshot.state
    return samples


async def thousand_nodes(layers: int, width: int, data_dir: Path) -> tuple[float, float, int]:
    workflow = layered(layers, width)
    async with create_kernel(durable_settings(data_dir)) as kernel:
        tracemalloc.start()
        started = time.perf_counter()
        result = await run_workflow(kernel, workflow, Trail())
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert result.status is TaskStatus.SUCCEEDED, result.task.error
        assert result.state is not None
        assert len(result.state.done) == layers * width + 1
        assert result.layers == layers + 1
        spans = [s for s in await kernel.task_spans(result.task_id) if s.kind == "step"]
        assert len(spans) == layers * width + 1
    return elapsed, peak / 2**20, layers * width + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="nodes of the chain")
    parser.add_argument("--tasks", type=int, default=5, help="chain tasks to time")
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--width", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        samples = anyio.run(per_node, args.nodes, args.tasks, Path(tmp) / "chain")
        stats = summary(samples)
        print(f"workflow per-node overhead ({STORES_NOTE}; checkpoint after every layer):")
        print(
            f"  {int(stats['n'])} nodes: p50 {stats['p50_ms']:.3f} ms, "
            f"p95 {stats['p95_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms  (target p95 < 1 ms)"
        )
        elapsed, peak_mib, nodes = anyio.run(
            thousand_nodes, args.layers, args.width, Path(tmp) / "layered"
        )
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{nodes}-node layered workflow ({args.layers} layers x {args.width}, all edges):")
    print(
        f"  {elapsed:.2f} s, {elapsed / nodes * 1000:.3f} ms/node; Python heap peak during the "
        f"run {peak_mib:.1f} MiB (tracemalloc); process peak RSS {rss_mib:.0f} MiB"
    )


if __name__ == "__main__":
    main()
