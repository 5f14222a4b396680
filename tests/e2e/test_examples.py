"""Every program in ``examples/`` runs as a newcomer would run it, and does what it says.

The convention, for whoever adds an example:

- An example is a top-level ``examples/*.py`` file. Each one found is run here in a
  subprocess, from a fresh temporary directory, with a fresh ``AGENT_DATA_DIR``, no other
  ``AGENT_*`` variable (so without ``AGENT_MODEL`` it runs on the shipped scripted model,
  offline), this checkout's ``src`` on ``PYTHONPATH`` and stdin empty. It must exit 0 with
  no traceback, and print every line fragment listed for it in ``EXPECTED`` below: the
  output that shows the kernel did the thing (what a tool returned, the validated answer,
  the decision taken). An example missing from ``EXPECTED`` fails, so a new example gets its
  checks when it is added.
- Its docstring says how to run it and how to point it at a real model (``AGENT_MODEL``); it
  stays short enough to read in a minute (``MAX_LINES``) and is listed in
  ``examples/README.md``.
- Subdirectories are not examples of this kind and are not run here: ``examples/desktop_qt``
  is a Qt application, driven offscreen by its own test (``tests/examples``).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.capability_entry_points import capability_site

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FOUND = sorted(EXAMPLES.glob("*.py"))  # top level only: see the module docstring
MAX_LINES = 80
GUARD_S = 300  # a hang guard for one example, not a timing claim

EXPECTED: dict[str, list[str]] = {
    "quick_start.py": [
        "status: succeeded",
        "answer: 17 * 23 + 4 = 395",  # the calculator's result, reported by the model
        "span tool       calculator",
    ],
    "custom_tool.py": [
        '"required": ["item"]',  # the schema the model sees: no ctx in it
        "→ check_stock({'item': 'coffee'})",
        "← coffee: 0 left",  # read from the Pantry passed as deps
        "← oat milk: 2 left",
        "succeeded: You are out of coffee",
    ],
    "typed_output.py": [
        'Invoice {\n  "vendor": "ACME Ltd",\n  "due": "2025-07-01"',  # repaired, validated
        "ACME Ltd wants 120.50 by 01 July 2025",
    ],
    "approval_callback.py": [
        "asked: {'to': 'plumber', 'amount': 80} (medium risk) -> yes",
        "asked: {'to': 'casino', 'amount': 5000} (medium risk) -> no",
        "send_payment: Error: a human did not approve send_payment: over my 100 EUR limit",
        "send_payment: paid 80.00 EUR to plumber",
        "waiting_approval on request ",
        "pending: send_payment({'to': 'landlord', 'amount': 950})",
        "succeeded: The rent is paid.",
    ],
    "streaming.py": [
        "task.strategy_selected react: ",
        "tool.started calculator({'expression': '(1234 + 4321) * 2'})",
        "policy.decided calculator: low risk",
        "tool.completed '11110' in ",
        "\n(1234 + 4321) * 2 = 11110\n",  # the streamed text, on a line of its own
        "task.succeeded input_tokens=",
    ],
    "workflow.py": [
        "succeeded after 4 layers: total='17 * 23 = 391'",  # the agent node's answer
        "notes=['price checked: 17 * 23 = 391', 'in stock']",  # parallel notes, merged
        "status='ordered (small order: no review)'",  # the Next jump with its data
        "span node order",
    ],
    "knowledge_base.py": [
        "ingested: returns.md (1 chunks)",
        "ingested: 保修.txt (1 chunks)",
        "knowledge_search found:\n  #1 保修.txt {'lexical': ",  # the Chinese passage first
        "succeeded: 电器产品享受两年免费保修",
    ],
    "nested_agent.py": [
        "[0] agent.handoff triage\n    [1] task.queued",  # the child's events, in the stream
        "        [2] approval.requested",  # the grandchild's risky call...
        "  host asked about restart_service -> yes",  # ...asked of this host
        "        [2] task.succeeded web restarted",
        "    [1] task.succeeded The web service had hung; it is restarted.",
        "[0] task.succeeded Fixed: the web service was restarted.",
    ],
    "team.py": [
        "  security  succeeded security: looks fine",
        "  tests     failed    ",  # one member failed...
        "  editor    succeeded Ship it: four reviews are fine",  # ...the aggregation went on
        "team succeeded: Ship it: four reviews are fine; the tests review is missing.",
    ],
    "supervisor.py": [
        "handoff to weather: 'Weather in Lisbon in May?' -> Sunny, 22°C",
        "handoff to budget: 'Cost of 3 nights in Lisbon?' -> About 450 EUR",
        "succeeded: Go in May: sunny, 22°C; about 450 EUR for 3 nights.",
    ],
    "mcp_agent.py": [
        "→ time__convert_time({'source_timezone': 'Asia/Tokyo', 'time': '09:00', ",
        "  policy: low risk (default:capabilities(read))",
        "← Asia/Kolkata 05:30 (untrusted data for the model)",  # mcp-server-time's answer
        "succeeded: A 09:00 meeting in Tokyo is at 05:30 in Kolkata.",
        "the server was stopped with the kernel",
    ],
}


def environment(work: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    # The capabilities of pyproject.toml (mcp...), even where the installed metadata predates them.
    site = capability_site(work / "entry-points")
    path = [str(REPO / "src"), str(site), base.get("PYTHONPATH", "")]
    return {
        **base,
        "AGENT_DATA_DIR": str(work / "data"),
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "PYTHONIOENCODING": "utf-8",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network for litellm's price table
    }


def test_every_example_has_its_checks_and_a_line_in_the_readme() -> None:
    names = [path.name for path in FOUND]
    assert names, "examples/ has no example"
    assert sorted(EXPECTED) == names, "EXPECTED lists exactly the examples found"
    listed = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert [n for n in names if f"`{n}`" not in listed] == [], "missing in examples/README.md"


@pytest.mark.parametrize("example", FOUND, ids=[path.name for path in FOUND])
def test_example_is_short_and_says_how_to_use_a_real_model(example: Path) -> None:
    source = example.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= MAX_LINES
    docstring = ast.get_docstring(ast.parse(source)) or ""
    assert f"python examples/{example.name}" in docstring
    assert "AGENT_MODEL=" in docstring


@pytest.mark.parametrize("example", FOUND, ids=[path.name for path in FOUND])
def test_example_runs_offline_and_prints_what_the_kernel_did(example: Path, tmp_path: Path) -> None:
    if example.name not in EXPECTED:
        pytest.fail(f"add {example.name} to EXPECTED with the output that shows it works")
    ran = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=GUARD_S,
        check=False,
    )
    assert ran.returncode == 0, f"--- stdout\n{ran.stdout}\n--- stderr\n{ran.stderr}"
    assert "Traceback" not in ran.stderr, ran.stderr
    missing = [line for line in EXPECTED[example.name] if line not in ran.stdout]
    assert missing == [], f"--- stdout\n{ran.stdout}\n--- stderr\n{ran.stderr}"
