"""Router accuracy on a labelled set, with a confusion matrix, and decision latency.

    python -m benchmarks.router_eval [--data tests/data/routing_eval.jsonl]
    python -m benchmarks.router_eval --data tests/data/routing_heldout.jsonl

Each line of the data file is ``{"task": "...", "label": "react" | "plan_execute"}``. The
decision runs the deterministic classifier only (no model call). Accuracy and latency are
also given per language: a task with a Han, kana or Hangul character counts as "zh".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.stats import summary
from core_agent.orchestration.strategy_router import AdaptiveStrategyRouter
from shared.agent_protocol import TaskRequest
from shared.cjk_text import has_cjk

DEFAULT_DATA = Path(__file__).parents[1] / "tests" / "data" / "routing_eval.jsonl"
LABELS = ("react", "plan_execute")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeat", type=int, default=200, help="timing passes over the set")
    parser.add_argument("--show-errors", action="store_true")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    router = AdaptiveStrategyRouter()
    matrix = {(truth, guess): 0 for truth in LABELS for guess in LABELS}
    errors = []
    for row in rows:
        decision = router.decide(TaskRequest(task=row["task"]), [])
        matrix[(row["label"], decision.strategy)] += 1
        if decision.strategy != row["label"]:
            errors.append((row["label"], decision.strategy, decision.reason, row["task"]))
    accuracy = sum(matrix[(k, k)] for k in LABELS) / len(rows)

    requests = [TaskRequest(task=row["task"]) for row in rows]
    samples: list[float] = []
    by_language: dict[str, list[float]] = {"en": [], "zh": []}
    for _ in range(args.repeat):
        for request in requests:
            start = time.perf_counter()
            router.decide(request, [])
            elapsed = (time.perf_counter() - start) * 1000.0
            samples.append(elapsed)
            by_language[_language(request.task)].append(elapsed)
    timing = summary(samples)
    languages = {}
    for language, latencies in by_language.items():
        subset = [row for row in rows if _language(row["task"]) == language]
        if not subset:
            continue
        right = sum(
            router.decide(TaskRequest(task=row["task"]), []).strategy == row["label"]
            for row in subset
        )
        languages[language] = {
            "n": len(subset),
            "accuracy": right / len(subset),
            "p95_ms": summary(latencies)["p95_ms"],
        }

    print(
        json.dumps(
            {
                "benchmark": "router_eval",
                "data": str(args.data),
                "n": len(rows),
                "accuracy": accuracy,
                "confusion": {f"{t}->{g}": n for (t, g), n in matrix.items()},
                "decision": timing,
                "by_language": languages,
                "target_accuracy": 0.95,
                "target_p95_ms": 1.0,
            }
        )
    )
    print(f"\nrouter accuracy on {len(rows)} labelled tasks: {accuracy:.1%} (held in: >= 95%)")
    print(f"{'truth / routed':>16} | {'react':>7} | {'plan_execute':>12}")
    for truth in LABELS:
        react, planned = matrix[(truth, "react")], matrix[(truth, "plan_execute")]
        print(f"{truth:>16} | {react:>7} | {planned:>12}")
    p50_us, p95_us = timing["p50_ms"] * 1000, timing["p95_ms"] * 1000
    print(
        f"decision latency over {int(timing['n'])} decisions: p50 {p50_us:.0f} µs,"
        f" p95 {p95_us:.0f} µs (target p95 < 1 ms)"
    )
    for language, figures in languages.items():
        print(
            f"  {language}: {figures['accuracy']:.1%} of {figures['n']},"
            f" p95 {figures['p95_ms'] * 1000:.0f} µs"
        )
    if args.show_errors:
        for truth, guess, reason, task in errors:
            print(f"- labelled {truth}, routed {guess} ({reason}): {task}")


def _language(task: str) -> str:
    return "zh" if has_cjk(task) else "en"


if __name__ == "__main__":
    main()
