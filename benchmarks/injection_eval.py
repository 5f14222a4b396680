"""True- and false-positive rates of the injection detector on a labelled set.

python -m benchmarks.injection_eval [--data tests/data/injection_eval.jsonl] [--show-errors]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core_agent.safety.injection_detector import InjectionDetector

DEFAULT_DATA = Path(__file__).parents[1] / "tests" / "data" / "injection_eval.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--show-errors", action="store_true")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    detector = InjectionDetector()
    counts = {"tp": 0, "fn": 0, "fp": 0, "tn": 0}
    errors = []
    for row in rows:
        report = detector.inspect(row["text"])
        injected = row["label"] == "injected"
        key = (
            ("tp" if report.suspicious else "fn")
            if injected
            else ("fp" if report.suspicious else "tn")
        )
        counts[key] += 1
        if key in ("fp", "fn"):
            errors.append((key, report.signals, row["text"]))
    tpr = counts["tp"] / max(1, counts["tp"] + counts["fn"])
    fpr = counts["fp"] / max(1, counts["fp"] + counts["tn"])
    print(json.dumps({"benchmark": "injection_eval", **counts, "tpr": tpr, "fpr": fpr}))
    print(
        f"injection detector on {len(rows)} labelled outputs: true-positive rate {tpr:.1%}, "
        f"false-positive rate {fpr:.1%} (tp {counts['tp']}, fn {counts['fn']}, "
        f"fp {counts['fp']}, tn {counts['tn']})"
    )
    if args.show_errors:
        for kind, signals, text in errors:
            print(f"- {kind}: {list(signals)} {text[:100]!r}")


if __name__ == "__main__":
    main()
