"""Policy decision latency and command parse + judge latency.

    python -m benchmarks.safety_latency

Decisions use the shipped rules with a tree-sitter shell parser (as the kernel does), and the
tool's own assessment where the kernel passes one (``run_command``); the commands are a mix
of simple, chained, wrapped and hostile lines, judged by the sandbox's ``CommandGuard``
(parse, program resolution on the search path, option profiles, path checks).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from benchmarks.stats import summary
from core_agent.contracts.settings import DEFAULT_ALLOWED_COMMANDS
from core_agent.contracts.tool import Capability, ToolAssessment, ToolSpec
from core_agent.safety.policy_engine import RulePolicyEngine
from providers.sandbox.commands import CommandGuard
from providers.sandbox.paths import PathGuard
from providers.sandbox.program_paths import default_search_path
from providers.shell.tree_sitter_parser import TreeSitterShellParser
from shared.agent_protocol import RiskLevel

CALLS = [
    (ToolSpec("read_file", "", {}, frozenset({Capability.READ})), {"path": "src/app.py"}),
    (ToolSpec("read_file", "", {}, frozenset({Capability.READ})), {"path": "config/.env"}),
    (
        ToolSpec("write_file", "", {}, frozenset({Capability.WRITE})),
        {"path": "a.md", "content": "x"},
    ),
    (
        ToolSpec("http_fetch", "", {}, frozenset({Capability.NETWORK})),
        {"url": "https://example.org/a"},
    ),
    (ToolSpec("calculator", "", {}), {"expression": "1 + 2"}),
    (
        ToolSpec("run_command", "", {}, frozenset({Capability.EXEC})),
        {"command": "git status"},
        ToolAssessment(risk=RiskLevel.LOW),
    ),
    (
        ToolSpec("run_command", "", {}, frozenset({Capability.EXEC})),
        {"command": "git log -n 5 | grep fix && ls src"},
        ToolAssessment(risk=RiskLevel.LOW),
    ),
]
COMMANDS = [
    "git status",
    "ls -la src && cat README.md | grep -i install",
    "bash -c 'git status; ls'",
    "find . -name '*.py' -exec cat {} \\;",
    "echo $(git rev-parse HEAD) > out.txt",
    "env LANG=C timeout 5 git log --format='%H %s' | head -n 20",
    "sort -rno/tmp/x data.csv | uniq -c > counts.txt",
    "X=$(touch p) ls; cat <<< $(id); echo ${x[$(id)]}",
]


def measure(fn, items, repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        for item in items:
            start = time.perf_counter()
            fn(item)
            samples.append((time.perf_counter() - start) * 1000.0)
    return summary(samples)


def main() -> None:
    parser = TreeSitterShellParser()
    engine = RulePolicyEngine.from_file(None, shell_parser=parser)
    policy = measure(
        lambda call: engine.evaluate(
            call[0], call[1], assessment=call[2] if len(call) > 2 else None
        ),
        CALLS,
        2000,
    )
    with tempfile.TemporaryDirectory() as root:
        roots = [Path(root)]
        guard = CommandGuard(
            parser, DEFAULT_ALLOWED_COMMANDS, PathGuard(roots), default_search_path(roots)
        )
        commands = measure(guard.assess, COMMANDS, 1000)
    for name, stats, target in (
        ("policy_decision", policy, 0.2),
        ("command_parse_and_judge", commands, 2.0),
    ):
        print(json.dumps({"benchmark": name, **stats, "target_p95_ms": target}))
        verdict = "meets" if stats["p95_ms"] < target else "MISSES"
        print(
            f"{name}: p50 {stats['p50_ms'] * 1000:.0f} µs, p95 {stats['p95_ms'] * 1000:.0f} µs"
            f" over {int(stats['n'])} ({verdict} the p95 < {target * 1000:.0f} µs target)"
        )


if __name__ == "__main__":
    main()
