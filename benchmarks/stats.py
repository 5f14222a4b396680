"""Percentiles for the benchmark scripts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


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
