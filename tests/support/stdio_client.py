"""A host of ``core-agent serve --stdio`` for tests and benchmarks: a real child process.

Every line the server writes is kept (``lines``), in order, with when it was read; requests
are matched to their responses by id. ``check_against_schema`` validates every line against
the JSON Schema that ``core-agent schema`` publishes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"

Message = dict[str, Any]


def server_env(data_dir: Path, **env: str) -> dict[str, str]:
    """The environment of a server: no ``AGENT_*`` of ours, this worktree's code first."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    path = os.pathsep.join(p for p in (str(SRC), base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path, "AGENT_DATA_DIR": str(data_dir), **env}


def server_command(*args: str) -> list[str]:
    """``core-agent serve --stdio`` with this interpreter (and so this worktree's code)."""
    return [sys.executable, "-m", "core_agent.cli", "serve", "--stdio", *args]


class StdioClient:
    """Starts the server and talks to it; use as a context manager (it closes stdin, waits)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        command: list[str] | None = None,
        read_stdout: bool = True,
        read_stderr: bool = True,
    ) -> None:
        """``read_stdout``/``read_stderr`` off: a host that does not read them (yet)."""
        self.process = subprocess.Popen(
            command or server_command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(data_dir, **(env or {})),
            cwd=cwd,
        )
        self.lines: list[Message] = []
        self.read_at: list[float] = []
        """``time.monotonic()`` when each line was read."""
        self.stderr = ""
        self.methods: dict[Any, str] = {}
        """The method of each request sent, by id (to check responses against the schema)."""
        self._ids = itertools.count(1_000_001)  # clear of the ids tests choose
        self._changed = threading.Condition()
        self._write_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        if read_stdout:
            self.start_reading_stdout()
        if read_stderr:
            self.start_reading_stderr()

    def start_reading_stdout(self) -> None:
        """Start reading the server's stdout (done at once unless ``read_stdout`` is off)."""
        self._threads[0].start()

    def start_reading_stderr(self) -> None:
        """Start reading the server's stderr (done at once unless ``read_stderr`` is off)."""
        self._threads[1].start()

    def __enter__(self) -> StdioClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None or not self.process.stdin.closed:  # type: ignore[union-attr]
            self.close()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            message = json.loads(raw)  # a line that is not JSON fails the test here
            with self._changed:
                self.lines.append(message)
                self.read_at.append(time.monotonic())
                self._changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.stderr += raw.decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        """Write raw bytes to the server's stdin (whole, in one call)."""
        assert self.process.stdin is not None
        with self._write_lock:
            self.process.stdin.write(data)
            self.process.stdin.flush()

    def send(self, message: Message) -> None:
        """Send one message as a line."""
        if "id" in message and "method" in message:
            self.methods[message["id"]] = message["method"]
        self.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")

    def call(self, method: str, params: Message | None = None, **kwargs: Any) -> Any:
        """Send a request and return its result (fails the test on an error response)."""
        response = self.request(method, params, **kwargs)
        assert "result" in response, response
        return response["result"]

    def request(
        self,
        method: str,
        params: Message | None = None,
        *,
        id: Any = None,
        timeout: float = 60,
    ) -> Message:
        """Send a request; its response."""
        rid = next(self._ids) if id is None else id
        message: Message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.wait_for(lambda m: m.get("id") == rid and "method" not in m, timeout=timeout)

    def wait_for(
        self, predicate: Callable[[Message], bool], *, since: int = 0, timeout: float = 60
    ) -> Message:
        """The first line from position ``since`` that ``predicate`` accepts, waiting for it."""
        deadline = time.monotonic() + timeout
        seen = since
        with self._changed:
            while True:
                for message in self.lines[seen:]:
                    if predicate(message):
                        return message
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (
                    self.process.poll() is not None and not self._threads[0].is_alive()
                ):
                    raise AssertionError(
                        f"no such message within {timeout} s; last lines: {self.lines[-5:]}\n"
                        f"stderr: {self.stderr[-3000:]}"
                    )
                self._changed.wait(min(left, 0.5))

    def notification(self, method: str, *, task_id: str | None = None, **match: Any) -> Message:
        """Wait for a notification of ``method`` (for ``task_id``; params fields ``match``)."""

        def wanted(message: Message) -> bool:
            params = message.get("params") or {}
            return (
                message.get("method") == method
                and (task_id is None or params.get("task_id") == task_id)
                and all(params.get(k) == v for k, v in match.items())
            )

        return self.wait_for(wanted)

    def event(self, kind: str, task_id: str) -> Message:
        """Wait for a ``task/event`` of ``kind`` for ``task_id``; its params."""
        return self.notification("task/event", task_id=task_id, kind=kind)["params"]

    def events(self, task_id: str) -> list[Message]:
        """The ``task/event`` params of ``task_id`` received so far, in order."""
        with self._changed:
            return [
                m["params"]
                for m in self.lines
                if m.get("method") == "task/event" and m["params"]["task_id"] == task_id
            ]

    def index(self, predicate: Callable[[Message], bool]) -> int:
        """The position of the first line ``predicate`` accepts."""
        with self._changed:
            return next(i for i, m in enumerate(self.lines) if predicate(m))

    def close(self, timeout: float = 60) -> int:
        """Close the server's stdin (end of input) and wait for it to exit; its status."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it exited already
            self.process.stdin.close()
        for thread in self._threads:
            if thread.ident is None:  # never started: read what is left, or it cannot exit
                thread.start()
        code = self.process.wait(timeout=timeout)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return code

    def check_against_schema(self, schema: Message) -> None:
        """Every line the server wrote validates against the published schema."""
        from jsonschema import Draft202012Validator

        index = schema["x-jsonrpc"]
        validators: dict[str, Draft202012Validator] = {}

        def validator(ref: str) -> Draft202012Validator:
            if ref not in validators:
                validators[ref] = Draft202012Validator({"$defs": schema["$defs"], "$ref": ref})
            return validators[ref]

        for message in self.lines:
            if "method" in message:
                ref = index["notifications"][message["method"]]["notification"]["$ref"]
            elif "error" in message:
                ref = index["error"]["$ref"]
            else:
                ref = index["methods"][self.methods[message["id"]]]["response"]["$ref"]
            errors = list(validator(ref).iter_errors(message))
            assert not errors, f"{ref}: {errors[0].message} in {json.dumps(message)[:500]}"
