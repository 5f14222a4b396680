"""An ``@tool`` function declared as a ``core_agent.tools`` entry point, as a package would.

Each test lays out an installed distribution (a ``*.dist-info`` folder with
``entry_points.txt``) in a temporary folder put on the path, so ``importlib.metadata`` finds
its entry points exactly as it finds those of a ``pip install``-ed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core_agent import create_kernel, tool
from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import TaskRequest, ToolCompleted
from support.entry_point_tools import declare_entry_points

CLI = Path(sys.executable).with_name("core-agent")
REPO = Path(__file__).resolve().parents[2]
TOOLS = "core_agent.tools"


def run(*args: str, site: Path, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    # This tree's code, the test's tool module, and the folder holding the distribution.
    path = [str(site), str(REPO / "src"), str(REPO / "tests"), base.get("PYTHONPATH", "")]
    return subprocess.run(
        [str(CLI), *args],
        env={
            **base,
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "AGENT_DATA_DIR": str(data_dir),
            "COLUMNS": "200",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def word_count_site(tmp_path: Path) -> Path:
    return declare_entry_points(
        tmp_path / "site",
        "word-tools",
        TOOLS,
        {"word_count": "support.entry_point_tools:word_count"},
    )


def test_a_tool_function_entry_point_is_offered_and_run_by_the_cli(tmp_path) -> None:
    site = word_count_site(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "word_count", "arguments": {"text": "one two three"}}]},
                {"content": "Three words."},
            ]
        )
    )
    data = tmp_path / "data"
    ran = run(
        "run", "How many words?", site=site, data_dir=data, AGENT_SCRIPTED_MODEL_SCRIPT=str(script)
    )
    assert ran.returncode == 0, ran.stderr
    assert '→ word_count({"text": "one two three"})' in ran.stderr
    assert "3" in ran.stderr.split("← ", 1)[1].splitlines()[:3]
    assert "Three words." in ran.stdout

    checked = run(
        "policy",
        "check",
        "--tool",
        "word_count",
        "--args",
        '{"text": "a b"}',
        site=site,
        data_dir=data,
    )
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert (report["valid"], report["risk"], report["approval_required"]) == (True, "low", False)

    listed = run("tasks", "--json", site=site, data_dir=data)
    assert listed.returncode == 0, listed.stderr
    assert [t["status"] for t in json.loads(listed.stdout)] == ["succeeded"]


def test_a_plain_function_declared_by_mistake_is_named_in_the_error(tmp_path) -> None:
    site = declare_entry_points(
        tmp_path / "site", "sloppy-tools", TOOLS, {"sloppy": "support.entry_point_tools:not_a_tool"}
    )
    ran = run("run", "2 + 2", site=site, data_dir=tmp_path / "data")
    assert ran.returncode != 0
    assert "while building 'sloppy' (support.entry_point_tools:not_a_tool, from sloppy-tools)" in (
        ran.stderr
    )
    assert "an object that implements ITool such as an @tool function" in ran.stderr


@pytest.mark.anyio
async def test_create_kernel_finds_the_entry_point_tool(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(word_count_site(tmp_path)))
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "word_count", "arguments": {"text": "a b c d"}}]},
                {"content": "ok"},
            ]
        )
    )
    settings = AgentSettings(data_dir=tmp_path / "data", scripted_model_script=script)
    async with create_kernel(settings) as kernel:
        events = [e async for e in kernel.stream_task(TaskRequest(task="count"))]
    (completed,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert not completed.result.is_error
    assert "4" in completed.result.content.splitlines()


def test_a_tool_in_code_may_not_take_an_installed_tools_name(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(word_count_site(tmp_path)))

    @tool(name="word_count")
    def count_differently(text: str) -> int:
        """Count otherwise."""
        return 0

    with pytest.raises(ConfigurationError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path / "data"), tools=[count_differently])
    message = str(caught.value)
    assert "the installed tool 'word_count' (support.entry_point_tools:word_count, from " in message
    assert "word-tools)" in message and "count_differently" in message
