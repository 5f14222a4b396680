"""``core-agent serve --stdio`` driven as a host drives it: a child process, lines in and out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.entry_point_tools import declare_entry_points
from support.stdio_client import StdioClient, server_command, server_env
from support.stdio_host import (
    REPORT_ANSWER,
    REPORT_FILE,
    REPORT_TASK,
    REPORT_TEXT,
    StdioHost,
    stdio_host,
)


@pytest.fixture
def host(tmp_path: Path) -> StdioHost:
    return stdio_host(tmp_path)


def published_schema() -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "core_agent.cli", "schema"],
        env=server_env(Path("/nonexistent")),
        capture_output=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_a_task_with_an_approval_round_trip_two_concurrent_tasks_and_a_cancel(host) -> None:
    workspace = host.workspace
    with host.serve() as client:
        accepted = client.call("execute_task", {"task": REPORT_TASK})
        report = accepted["task_id"]
        # The answer comes before anything is said about the task.
        client.event("task.queued", report)
        answered = client.index(lambda m: m.get("result", {}).get("task_id") == report)
        first_event = client.index(
            lambda m: m.get("method") == "task/event" and m["params"]["task_id"] == report
        )
        assert answered < first_event

        asked = client.notification("approval/requested", task_id=report)["params"]
        assert asked["tool_call"]["name"] == "write_file"
        assert asked["tool_call"]["arguments"]["content"] == REPORT_TEXT
        assert asked["risk"] == "high" and asked["rule"] == "reports-need-a-human"
        assert client.call("get_task", {"task_id": report})["status"] == "waiting_approval"
        pending = client.call("list_pending_approvals")["requests"]
        assert [r["request_id"] for r in pending] == [asked["request_id"]]
        waiting = client.notification("task/result", task_id=report)["params"]
        assert waiting["status"] == "waiting_approval"
        assert waiting["pending_approval"] == asked["request_id"]
        assert not (workspace / REPORT_FILE).exists()

        # Two tasks at once over the same connection, while the first one waits.
        naps = [client.call("execute_task", {"task": f"nap {n}"})["task_id"] for n in (1, 2)]
        results = [client.notification("task/result", task_id=t)["params"] for t in naps]
        assert [r["status"] for r in results] == ["succeeded", "succeeded"]
        assert [r["output"] for r in results] == ["rested", "rested"]
        started = [client.index(_event("tool.started", t)) for t in naps]
        completed = [client.index(_event("tool.completed", t)) for t in naps]
        assert max(started) < min(completed), "the two commands did not run at the same time"

        # A cancel stops a running command.
        long_nap = client.call("execute_task", {"task": "long nap"})["task_id"]
        client.event("tool.started", long_nap)
        canceled_at = time.monotonic()
        state = client.call("cancel_task", {"task_id": long_nap, "reason": "user clicked stop"})
        assert state["task_id"] == long_nap
        result = client.notification("task/result", task_id=long_nap)["params"]
        assert result["status"] == "canceled" and result["error"] == "user clicked stop"
        assert time.monotonic() - canceled_at < 20  # the 30 s command did not run out
        assert client.event("task.canceled", long_nap)["reason"] == "user clicked stop"

        # The human approves: the task carries on and its events keep coming.
        decision = {"request_id": asked["request_id"], "approved": True, "reason": "好的"}
        assert client.call("resolve_approval", decision) == {
            "kind": "approval_accepted",
            "request_id": asked["request_id"],
            "task_id": report,
        }
        done = client.notification("task/result", task_id=report, status="succeeded")["params"]
        assert done["output"] == REPORT_ANSWER
        assert (workspace / REPORT_FILE).read_text(encoding="utf-8") == REPORT_TEXT
        kinds = [e["kind"] for e in client.events(report)]
        resolved = kinds.index("approval.resolved")
        after = [k for k in kinds[resolved:] if k != "llm.delta"]
        assert after[:2] == ["approval.resolved", "task.resumed"]
        assert after.index("tool.started") < after.index("tool.completed")
        assert after[-2:] == ["llm.completed", "task.succeeded"]

        listed = client.call("list_tasks", {"limit": 10})["tasks"]
        assert sorted(t["status"] for t in listed) == [
            "canceled",
            "succeeded",
            "succeeded",
            "succeeded",
        ]
        trace = client.call("get_trace", {"task_id": report})
        assert {"approval", "tool", "llm"} <= {s["kind"] for s in trace["spans"]}
        assert client.call("list_pending_approvals") == {"requests": []}
        assert client.close() == 0
    assert "Traceback" not in client.stderr, client.stderr
    client.check_against_schema(published_schema())


def _event(kind: str, task_id: str):
    def match(message: dict[str, object]) -> bool:
        params = message.get("params")
        return (
            message.get("method") == "task/event"
            and isinstance(params, dict)
            and params["kind"] == kind
            and params["task_id"] == task_id
        )

    return match


def test_a_waiting_task_survives_the_servers_restart(host) -> None:
    with host.serve() as first:
        report = first.call("execute_task", {"task": REPORT_TASK})["task_id"]
        asked = first.notification("approval/requested", task_id=report)["params"]
        assert first.close() == 0

    with host.serve() as second:
        pending = second.call("list_pending_approvals")["requests"]
        assert [r["request_id"] for r in pending] == [asked["request_id"]]
        second.call("resolve_approval", {"request_id": asked["request_id"], "approved": True})
        done = second.notification("task/result", task_id=report)["params"]
        assert done["status"] == "succeeded" and done["output"] == REPORT_ANSWER
        assert second.event("task.succeeded", report)["output"] == REPORT_ANSWER
        assert second.close() == 0


@pytest.mark.parametrize("how", ["end of input", "SIGTERM", "end of input, then SIGTERM"])
def test_a_task_still_running_at_shutdown_is_left_for_the_next_server(host, how) -> None:
    with host.serve("--drain-timeout", "0.5" if how == "end of input" else "60") as first:
        long_nap = first.call("execute_task", {"task": "long nap"})["task_id"]
        first.event("tool.started", long_nap)
        closed_at = time.monotonic()
        if how.startswith("end of input"):
            first.process.stdin.close()  # type: ignore[union-attr]
        if how.endswith("SIGTERM"):
            time.sleep(0.5)  # (after the end of input: while the 60 s drain waits)
            first.process.send_signal(signal.SIGTERM)  # no drain: left at once
        assert first.close() == 0
        assert time.monotonic() - closed_at < 20  # it did not wait for the 30 s command
        assert not any(e["kind"] == "task.canceled" for e in first.events(long_nap))
        assert "leaving 1 task(s) for recovery" in first.stderr

    # The next server recovers it: the command may or may not have had its effect, and it
    # is not idempotent, so a human is asked before it runs again.
    with host.serve() as second:
        asked = second.notification("approval/requested", task_id=long_nap)["params"]
        assert asked["tool_call"]["arguments"] == {"command": "sleep 30"}
        assert second.call("get_task", {"task_id": long_nap})["status"] == "waiting_approval"
        second.call("cancel_task", {"task_id": long_nap})
        assert second.call("get_task", {"task_id": long_nap})["status"] == "canceled"
        assert second.close() == 0


def test_a_bad_configuration_is_reported_on_stderr_before_the_protocol_starts(host) -> None:
    with host.serve(AGENT_TASK_STORE="redis") as client:
        assert client.process.wait(timeout=60) == 2
    assert client.lines == []
    assert "installed: sqlite" in client.stderr


def test_once_claimed_stdout_carries_protocol_lines_only(tmp_path: Path) -> None:
    program = (
        "import os, subprocess\n"
        "from core_agent.stdio_server import claim_stdio\n"
        "protocol_in, protocol_out = claim_stdio()\n"
        "print('a stray print', flush=True)\n"
        "os.write(1, b'a raw write to descriptor 1\\n')\n"
        "subprocess.run(['echo', 'a child process'], check=True)\n"
        "os.write(protocol_out, b'{}\\n')\n"
        "print('stdin now reads:', os.read(0, 10))\n"
        "print('the protocol reads:', os.read(protocol_in, 100))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        input=b"the host's request\n",
        env=server_env(tmp_path),
        capture_output=True,
        check=True,
    )
    assert done.stdout == b"{}\n"
    for text in (b"a stray print", b"a raw write", b"a child process", b"stdin now reads: b''"):
        assert text in done.stderr
    assert b'the protocol reads: b"the host\'s request\\n"' in done.stderr


def test_requests_from_a_file_and_output_to_a_file(host) -> None:
    # Neither a pipe: the server reads and writes through its threads, and the end of the
    # file is the end of input, after which the task still runs to its end (the drain).
    requests = host.workspace.parent / "requests.jsonl"
    requests.write_text(
        '{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
        '{"jsonrpc":"2.0","id":2,"method":"execute_task","params":{"task":"nap, 然后报告"}}\n',
        encoding="utf-8",
    )
    output = host.workspace.parent / "output.jsonl"
    with requests.open("rb") as stdin, output.open("wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "core_agent.cli", "serve", "--stdio"],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=server_env(host.data_dir, **host.env),
            cwd=host.workspace,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert lines[1]["id"] == 2 and lines[1]["result"]["kind"] == "task_accepted"
    assert lines[2]["params"]["request"]["task"] == "nap, 然后报告"
    assert lines[-1]["method"] == "task/result"
    assert lines[-1]["params"]["status"] == "succeeded"


def test_a_plugin_that_prints_as_it_loads_cannot_corrupt_stdout(host, tmp_path: Path) -> None:
    # A tool package that prints when imported: the kernel imports it as it is built, which
    # must happen once stdout is the protocol's.
    site = tmp_path / "site"
    site.mkdir()
    (site / "noisy_tool.py").write_text(
        "print('hello from a plugin import')\n"
        "from core_agent import tool\n"
        "@tool(capabilities={'read'})\n"
        "def noisy(text: str) -> str:\n"
        '    """Says it again."""\n'
        "    return text\n",
        encoding="utf-8",
    )
    declare_entry_points(site, "noisy-tools", "core_agent.tools", {"noisy": "noisy_tool:noisy"})
    env = server_env(host.data_dir, **host.env)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    done = subprocess.run(
        server_command(),
        input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
        env=env,
        cwd=host.workspace,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    assert b"hello from a plugin import" in done.stderr


def test_every_task_the_connection_started_gets_a_final_result(host) -> None:
    with host.serve() as client:
        # Canceled while it waits for a human: no run of it is going, yet it is reported.
        first = client.call("execute_task", {"task": REPORT_TASK})
        client.notification("approval/requested", task_id=first["task_id"])
        client.call("cancel_task", {"task_id": first["task_id"], "reason": "not now"})
        canceled = client.notification("task/result", task_id=first["task_id"], status="canceled")[
            "params"
        ]
        assert canceled["error"] == "not now"
        assert canceled["session_id"] == first["session_id"]
        assert canceled["trace_id"] == first["trace_id"]
        assert client.index(_event("task.canceled", first["task_id"])) < client.index(
            lambda m: m.get("params", {}).get("status") == "canceled"
        )

        # Answered and run to its end by another process: the server finds it ended.
        second = client.call("execute_task", {"task": REPORT_TASK})["task_id"]
        asked = client.notification("approval/requested", task_id=second)["params"]
        resolved = subprocess.run(
            [sys.executable, "-m", "core_agent.cli", "resolve", asked["request_id"], "--approve"],
            env=server_env(host.data_dir, **host.env),
            cwd=host.workspace,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert resolved.returncode == 0, resolved.stderr
        done = client.notification("task/result", task_id=second, status="succeeded")["params"]
        assert done["output"] == REPORT_ANSWER

        client.call("ping")
        time.sleep(5)  # (two looks of the server's watch: no second report comes)
        for task_id in (first["task_id"], second):
            results = [
                m["params"]["status"]
                for m in client.lines
                if m.get("method") == "task/result" and m["params"]["task_id"] == task_id
            ]
            assert results[0] == "waiting_approval" and len(results) == 2, results
        assert client.close() == 0
    assert "Traceback" not in client.stderr, client.stderr


def test_the_server_will_not_make_home_or_the_root_its_workspace(host, tmp_path: Path) -> None:
    # A desktop app often starts its child in the home directory, where a write to .bashrc
    # would be a mere workspace write. `core-agent run` keeps the current directory.
    home = tmp_path / "home"
    home.mkdir()
    unset = {k: v for k, v in host.env.items() if k != "AGENT_WORKSPACE_ROOTS"}
    for cwd in (home, Path("/")):
        with StdioClient(host.data_dir, env={**unset, "HOME": str(home)}, cwd=cwd) as client:
            assert client.process.wait(timeout=60) == 2
        assert client.lines == []
        assert "no workspace: AGENT_WORKSPACE_ROOTS is unset" in client.stderr
    # Named, any workspace is taken, whatever the current directory.
    with StdioClient(host.data_dir, env={**host.env, "HOME": str(home)}, cwd=home) as client:
        assert client.call("ping") == {}
        assert client.close() == 0
