"""Start-up cost: ``import core_agent`` and ``core-agent --help`` in fresh processes.

Each command runs ``--runs`` times after one warm-up (so the OS file cache is warm, as it is
for a user who has run the tool before); the median is the figure compared with the target.
A bare ``python -c pass`` is measured too, as the floor no Python program can go below.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CLI = str(Path(sys.executable).with_name("core-agent"))

COMMANDS = {
    "python -c pass (floor)": ([sys.executable, "-c", "pass"], None),
    "import core_agent": ([sys.executable, "-c", "import core_agent"], 150.0),
    "core-agent --help": ([CLI, "--help"], 300.0),
}


def time_command(command: list[str], runs: int) -> list[float]:
    subprocess.run(command, check=True, capture_output=True)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        samples.append((time.perf_counter() - start) * 1000.0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for name, (command, target) in COMMANDS.items():
        samples = time_command(command, args.runs)
        median = statistics.median(samples)
        print(
            json.dumps(
                {
                    "benchmark": "startup",
                    "command": name,
                    "median_ms": median,
                    "min_ms": min(samples),
                    "max_ms": max(samples),
                    "target_ms": target,
                }
            )
        )
        verdict = (
            ""
            if target is None
            else (f" ({'meets' if median < target else 'MISSES'} the < {target:.0f} ms target)")
        )
        print(f"{name}: median {median:.1f} ms over {args.runs} runs{verdict}")


if __name__ == "__main__":
    main()
