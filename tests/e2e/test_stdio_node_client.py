"""A non-Python host: a Node.js program (``stdio_client.mjs``) drives the stdio server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.stdio_client import server_env
from support.stdio_host import REPORT_ANSWER, REPORT_FILE, REPORT_TASK, REPORT_TEXT, stdio_host

CLIENT = Path(__file__).with_name("stdio_client.mjs")


def node_executable() -> str:
    """Node.js, installed from Debian's ``nodejs`` package when the machine has none."""
    found = shutil.which("node") or shutil.which("nodejs")
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "nodejs"],
    )
    for step in steps:
        try:
            done = subprocess.run(
                step, env=env, capture_output=True, text=True, timeout=900, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.fail(f"Node.js is missing and `{' '.join(step)}` could not run: {exc}")
        if done.returncode != 0:
            pytest.fail(
                f"Node.js is missing and `{' '.join(step)}` failed ({done.returncode}): "
                f"{done.stderr.strip()[-2000:]}"
            )
    found = shutil.which("node") or shutil.which("nodejs")
    if not found:
        pytest.fail("Node.js is missing, and installing Debian's nodejs gave no `node` command")
    return found


def test_a_node_host_runs_a_task_and_answers_its_approval(tmp_path: Path) -> None:
    host = stdio_host(tmp_path)
    done = subprocess.run(
        [node_executable(), str(CLIENT), sys.executable, REPORT_TASK],
        env=server_env(host.data_dir, **host.env),
        cwd=host.workspace,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["pong"] == {}
    assert seen["answeredFirst"] is True
    assert seen["asked"]["tool_call"]["arguments"] == {"path": REPORT_FILE, "content": REPORT_TEXT}
    assert seen["decision"]["task_id"] == seen["accepted"]["task_id"]
    assert seen["result"]["status"] == "succeeded"
    assert seen["result"]["output"] == REPORT_ANSWER
    assert seen["kinds"][0] == "task.queued" and seen["kinds"][-1] == "task.succeeded"
    assert {"approval.requested", "task.waiting_approval", "approval.resolved"} <= set(
        seen["kinds"]
    )
    assert seen["resolvedReason"] == "Node 说可以"  # Chinese went there and back
    assert seen["exitCode"] == 0
    assert (host.workspace / REPORT_FILE).read_text(encoding="utf-8") == REPORT_TEXT
