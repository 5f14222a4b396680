"""Percentiles for the benchmark scripts."""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio


def summary(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, mean and count of samples in milliseconds."""
    ordered = sorted(samples_ms)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "n": float(len(ordered)),
        "p50_ms": statistics.median(ordered),
        "p95_ms": cuts[94],
        "p99_ms": cuts[98],
        "mean_ms": statistics.fmean(ordered),
    }


async def intervals_between(
    kernel: Any, event_type: type[Any], request: Any, tasks: int
) -> list[float]:
    """Run ``request`` ``tasks`` times; milliseconds between consecutive ``event_type`` events."""
    marks: list[float] = []
    kernel.event_bus.subscribe(event_type, lambda _event: marks.append(time.perf_counter()))
    samples: list[float] = []
    async with kernel:
        for _ in range(tasks):
            marks.clear()
            result = await kernel.execute_task(request)
            assert result.status.value == "succeeded", result.error
            samples.extend((b - a) * 1000.0 for a, b in itertools.pairwise(marks))
    return samples


def run_step_benchmark(
    name: str,
    label: str,
    measure: Callable[[int, int, Path], Awaitable[list[float]]],
    *,
    doc: str | None,
    default_tasks: int,
    target_p95_ms: float = 2.0,
) -> None:
    """Parse ``--tasks``/``--steps``, warm up, measure, print JSON and a sentence."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--tasks", type=int, default=default_tasks)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(measure, 3, args.steps, Path(tmp))  # warm-up: imports, caches, WAL file
        samples = anyio.run(measure, args.tasks, args.steps, Path(tmp))
    stats = summary(samples)
    print(json.dumps({"benchmark": name, **stats, "target_p95_ms": target_p95_ms}))
    verdict = "meets" if stats["p95_ms"] < target_p95_ms else "MISSES"
    print(
        f"{label} over {int(stats['n'])} steps: p50 {stats['p50_ms']:.3f} ms, "
        f"p95 {stats['p95_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms "
        f"({verdict} the p95 < {target_p95_ms:g} ms target)"
    )
