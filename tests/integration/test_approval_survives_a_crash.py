"""A host killed while a risky call waits for approval: after a restart the request is still
pending, and resolving it resumes the task exactly once."""

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core_agent import create_kernel
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import ApprovalDecision, TaskStatus

pytestmark = pytest.mark.anyio
HOST = Path(__file__).parents[1] / "support" / "waiting_host.py"


def read_line(stream, timeout: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ""


def crash_while_waiting(env: dict[str, str]) -> str:
    """Start the host, wait until it asks for approval, kill -9 it; the request's id."""
    with subprocess.Popen(
        [sys.executable, str(HOST)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as host:
        try:
            line = read_line(host.stdout, timeout=120)
            if not line.startswith("WAITING "):
                host.kill()
                raise AssertionError(f"host did not wait: {line!r} {host.stderr.read()}")
            return line.split()[1]
        finally:
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=30)


async def test_a_pending_approval_survives_kill_9_and_resolves_once(tmp_path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text("TOKEN=abc123\n")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": ".env"}}]},
                {"content": "The token is in the file."},
            ]
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "AGENT_WORKSPACE_ROOTS": str(workspace),
        "AGENT_SCRIPTED_MODEL_SCRIPT": str(script),
        # This checkout's code in the children too (tests first, then the test's own path).
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    request_id = crash_while_waiting(env)

    settings = AgentSettings(
        data_dir=tmp_path / "data", workspace_roots=(workspace,), scripted_model_script=script
    )
    async with create_kernel(settings) as kernel:  # a new process, the same database
        (pending,) = await kernel.pending_approvals()
        assert pending.request_id == request_id
        assert pending.tool_call.name == "read_file" and pending.rule == "secret-files"
        task_id = pending.task_id
        assert (await kernel.get_task(task_id)).status is TaskStatus.WAITING_APPROVAL

        decision = ApprovalDecision(request_id=request_id, approved=True, decided_by="test")
        result = await kernel.resolve_approval(request_id, decision)
        assert result.status is TaskStatus.SUCCEEDED, result.error
        assert result.output == "The token is in the file."
        with pytest.raises(UsageError, match="already approved by test"):
            await kernel.resolve_approval(request_id, decision)

        events = await kernel.task_events(task_id)
    kinds = [e.kind for e in events]
    assert kinds.count("approval.requested") == 1
    assert kinds.count("approval.resolved") == 1
    reads = [e.result for e in events if e.kind == "tool.completed"]
    assert len(reads) == 1 and "TOKEN=abc123" in reads[0].content
