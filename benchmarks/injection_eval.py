"""True- and false-positive rates of the injection detector on a labelled set.

python -m benchmarks.injection_eval [--data tests/data/injection_eval.jsonl] [--show-errors]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core_agent.safety.injection_detector import InjectionDetector
from shared.cjk_text import has_cjk

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
    by_language = {}
    for language in ("en", "zh"):
        rows_in = [r for r in rows if has_cjk(r["text"]) == (language == "zh")]
        pos = [r for r in rows_in if r["label"] == "injected"]
        neg = [r for r in rows_in if r["label"] != "injected"]
        by_language[language] = {
            "injected": len(pos),
            "benign": len(neg),
            "tpr": sum(detector.inspect(r["text"]).suspicious for r in pos) / max(1, len(pos)),
            "fpr": sum(detector.inspect(r["text"]).suspicious for r in neg) / max(1, len(neg)),
        }
    print(
        json.dumps(
            {
                "benchmark": "injection_eval",
                **counts,
                "tpr": tpr,
                "fpr": fpr,
                "by_language": by_language,
            }
        )
    )
    print(
        f"injection detector on {len(rows)} labelled outputs: true-positive rate {tpr:.1%}, "
        f"false-positive rate {fpr:.1%} (tp {counts['tp']}, fn {counts['fn']}, "
        f"fp {counts['fp']}, tn {counts['tn']})"
    )
    for language, f in by_language.items():
        print(
            f"  {language}: TPR {f['tpr']:.1%} of {f['injected']} injected,"
            f" FPR {f['fpr']:.1%} of {f['benign']} benign"
        )
    if args.show_errors:
        for kind, signals, text in errors:
            print(f"- {kind}: {list(signals)} {text[:100]!r}")


if __name__ == "__main__":
    main()
