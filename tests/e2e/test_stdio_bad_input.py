"""Bad input on the stdio channel: an error response each, no crash, other tasks unaffected."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from support.stdio_client import StdioClient
from support.stdio_host import stdio_host

TEN_MB = 10 * 1024 * 1024


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def errors_after(client: StdioClient, start: int) -> list[dict[str, object]]:
    return [m["error"] for m in client.lines[start:] if "error" in m]


def test_bad_lines_are_answered_and_a_running_task_ends_normally(tmp_path: Path) -> None:
    host = stdio_host(tmp_path)
    with host.serve() as client:
        nap = client.call("execute_task", {"task": "nap while they misbehave"})["task_id"]
        client.event("tool.started", nap)  # it runs meanwhile

        cases: list[tuple[bytes, int, object]] = [
            # (line, expected code, expected id)
            (b'{"jsonrpc":"2.0","id":1,"method":"pi', -32700, None),  # truncated
            (b"\xff\xfe not utf-8", -32700, None),
            (b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":NaN}}', -32700, None),
            (b"[" * 100_000 + b"]" * 100_000, -32700, None),  # nested beyond the parser
            (b"[]", -32600, None),  # a batch
            (b'"ping"', -32600, None),
            (b'{"jsonrpc":"1.0","id":3,"method":"ping"}', -32600, 3),
            (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600, None),
            (b'{"jsonrpc":"2.0","id":4.5,"method":"ping"}', -32600, None),
            (b'{"jsonrpc":"2.0","id":5,"method":7}', -32600, 5),
            (b'{"jsonrpc":"2.0","id":6,"method":"ping","param":{}}', -32600, 6),
            (b'{"jsonrpc":"2.0","id":7,"method":"launch_missiles"}', -32601, 7),
            (b'{"jsonrpc":"2.0","id":8,"method":"get_task","params":{"task_id":5}}', -32602, 8),
            (b'{"jsonrpc":"2.0","id":9,"method":"execute_task","params":{"task":""}}', -32602, 9),
            (b'{"jsonrpc":"2.0","id":10,"method":"execute_task","params":["nap"]}', -32602, 10),
            (b'{"jsonrpc":"2.0","id":11,"method":"get_task","params":{"task_id":"0"}}', -32001, 11),
            (
                b'{"jsonrpc":"2.0","id":12,"method":"resolve_approval",'
                b'"params":{"request_id":"nope","approved":true}}',
                -32001,
                12,
            ),
            # Valid JSON that is no text: a lone surrogate in the id, a member, a param.
            (b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', -32600, None),
            (b'{"jsonrpc":"2.0","id":13,"method":"ping","\\udc00":1}', -32600, None),
            (
                b'{"jsonrpc":"2.0","id":14,"method":"get_task","params":{"task_id":"\\ud800"}}',
                -32600,
                None,
            ),
        ]
        for line, code, rid in cases:
            start = len(client.lines)
            client.write(line + b"\n")
            if rid is None:
                # Refused as it is read: the error comes before the next request's answer.
                client.call("ping")
            else:
                client.wait_for(lambda m, rid=rid: m.get("id") == rid, since=start)
            (error,) = errors_after(client, start)
            assert error["code"] == code, (line[:80], error)
            response = next(m for m in client.lines[start:] if "error" in m)
            assert response["id"] == rid, (line[:80], response)
            assert "\n" not in error["message"]

        # Params errors say what is wrong, in one line, with pydantic's details in data.
        bad_params = next(m["error"] for m in client.lines if m.get("id") == 8 and "error" in m)
        assert bad_params["message"] == (
            "invalid params for get_task: task_id: Input should be a valid string"
        )
        assert bad_params["data"]["errors"][0]["loc"] == ["task_id"]
        unknown_task = next(m["error"] for m in client.lines if m.get("id") == 11)
        assert unknown_task["data"] == {"type": "TaskNotFoundError"}

        # An unknown notification (no id) is ignored, as JSON-RPC says: no answer at all.
        start = len(client.lines)
        client.write(b'{"jsonrpc":"2.0","method":"host/heartbeat","params":{}}\n')
        client.call("ping")
        assert errors_after(client, start) == []

        # An id reused while the first request with it is still in flight.
        start = len(client.lines)
        twice = b'{"jsonrpc":"2.0","id":"dup","method":"list_tasks"}\n'
        client.methods["dup"] = "list_tasks"
        client.write(twice + twice)  # one write: the second arrives before the first is answered
        client.wait_for(lambda m: m.get("id") == "dup")
        client.call("ping")
        (error,) = errors_after(client, start)
        assert error["code"] == -32600 and error["data"] == {"id": "dup"}
        first = next(m for m in client.lines[start:] if m.get("id") == "dup")
        assert first["result"]["tasks"]

        # A 10 MB line: refused as soon as it passes the limit, dropped, and the server goes on.
        other_nap = client.call("execute_task", {"task": "nap through a flood"})["task_id"]
        start = len(client.lines)
        huge = b'{"jsonrpc":"2.0","id":"huge","method":"execute_task","params":{"task":"'
        huge += b"x" * (TEN_MB - len(huge) - 4) + b'"}}\n'
        peak_before = peak_rss_kib(client.process.pid)
        writer = threading.Thread(target=client.write, args=(huge,))
        writer.start()
        refusal = client.wait_for(lambda m: "error" in m, since=start)
        writer.join(timeout=120)
        assert refusal["error"]["code"] == -32600
        assert refusal["error"]["data"] == {"limit_bytes": 1024 * 1024}
        assert "longer than the limit" in refusal["error"]["message"]
        assert client.call("ping") == {}
        assert not any(m.get("id") == "huge" for m in client.lines)
        # Read as it came, never held whole (it would take 10 MiB, twice over as it grew).
        assert peak_rss_kib(client.process.pid) - peak_before < 5 * 1024

        # The tasks that ran meanwhile ended normally, and no other task was made.
        for task_id in (nap, other_nap):
            result = client.notification("task/result", task_id=task_id)["params"]
            assert result["status"] == "succeeded" and result["output"] == "rested"
        listed = client.call("list_tasks")["tasks"]
        assert sorted(t["task_id"] for t in listed) == sorted([nap, other_nap])
        assert client.close() == 0
    assert "Traceback" not in client.stderr, client.stderr


def test_a_line_just_under_the_limit_is_read(tmp_path: Path) -> None:
    host = stdio_host(tmp_path)
    with host.serve("--max-message-bytes", "4096") as client:
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
        line = json.dumps(envelope).encode()
        padded = line[:-1] + b" " * (4096 - len(line)) + b"}"
        assert len(padded) == 4096
        client.write(padded + b"\n")
        assert client.wait_for(lambda m: m.get("id") == 1) == {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {},
        }
        client.write(padded[:-1] + b" }\n")  # one byte more
        refusal = client.wait_for(lambda m: "error" in m)
        assert refusal["error"]["data"] == {"limit_bytes": 4096}
        assert client.close() == 0
