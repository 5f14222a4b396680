"""First streamed token: `core-agent run` against a local OpenAI-compatible server.

Each run starts a fresh `core-agent run "..."` process (no key set: the placeholder key for a
server at AGENT_MODEL_API_BASE) pointed at a loopback server that speaks the OpenAI protocol
and streams its answer at once. The time is from starting the process to the first byte of the
answer on its stdout, a pseudo-terminal as a person's is (into a pipe or a file the command
prints the answer once, when the task has succeeded, so nothing streams there). The work is
checked every run: exit 0, the whole answer printed, and the server received a streamed chat
request (so the model library really ran).

By default an ``openai/`` model at a base URL goes through the plain HTTP gateway
(``openai_http``, httpx); ``--gateway litellm`` measures the litellm gateway instead, whose
floor is importing litellm (about 2.7 s on these machines: it starts in a background thread
when the task starts, but Python threads share one interpreter lock, so the overlap only hides
the waits, not the import's own CPU time). Either way the check that the gateway ran is the
server's streamed request.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.openai_server import OpenAIServer, Reply

from benchmarks.stats import summary

CLI = str(Path(sys.executable).with_name("core-agent"))
ANSWER = "Hello from the local server."
TARGET_S = 2.0


def first_token_s(server: OpenAIServer, data_dir: Path, gateway: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "OPENAI_"))}
    env.update(
        AGENT_DATA_DIR=str(data_dir),
        AGENT_MODEL="openai/local-model",
        AGENT_MODEL_API_BASE=server.base_url,
    )
    if gateway:
        env["AGENT_LLM_GATEWAY"] = gateway
    requests_before = len(server.requests)
    start = time.perf_counter()
    screen, terminal = os.openpty()
    process = subprocess.Popen(
        [CLI, "run", "Say hello."], env=env, stdout=terminal, stderr=subprocess.PIPE
    )
    os.close(terminal)
    first = os.read(screen, 1)
    elapsed = time.perf_counter() - start
    rest = []
    while True:
        try:
            piece = os.read(screen, 4096)
        except OSError:  # EIO: the process closed its end
            break
        if not piece:
            break
        rest.append(piece)
    os.close(screen)
    _, errors = process.communicate(timeout=120)
    output = (first + b"".join(rest)).decode()
    assert process.returncode == 0, errors.decode()[-2000:]
    assert ANSWER in output, output
    new = server.requests[requests_before:]
    assert new, "the server was never called"
    assert all(request.get("stream") for request in new), new
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--gateway", default=None, help="AGENT_LLM_GATEWAY for the runs (default: unset)"
    )
    args = parser.parse_args()
    server = OpenAIServer()
    server.responder = lambda body: Reply(content=ANSWER)
    samples = []
    with server, tempfile.TemporaryDirectory() as tmp:
        # The OS file cache, as for a returning user.
        first_token_s(server, Path(tmp) / "warm-up", args.gateway)
        for run in range(args.runs):
            samples.append(first_token_s(server, Path(tmp) / f"run-{run}", args.gateway) * 1000.0)
    stats = summary(samples)
    print(
        json.dumps(
            {
                "benchmark": "first_token",
                "runs": args.runs,
                "gateway": args.gateway or "default (openai_http for openai/ at a base URL)",
                "first_token_ms": stats,
                "target_ms": TARGET_S * 1000.0,
                "met": stats["p95_ms"] < TARGET_S * 1000.0,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
