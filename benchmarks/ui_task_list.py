"""The trace viewer's pages over 100k stored tasks: server time to produce the HTML.

A kernel is made on a temporary data directory (its migrations create the schema), then
100,000 tasks are inserted straight into ``agent_tasks`` in batches (100 sessions; 85 %
succeeded, 7 % failed, 3 % canceled, 4 % running, 1 % waiting for a human, each with a
pending row in ``agent_approvals``; a third of the task texts in Chinese), and one real task
is run through the kernel (scripted model, a calculator call) for the task page. The
viewer's ASGI application (``viewer_app``, behind its token and Host checks) is then asked
for each page in process, through httpx's ASGI transport: the time from the request to the
last byte of the HTML is the server's time (the store's query, the rows read, ``TaskState``
built, the template rendered), without a socket; the first page is also timed through
uvicorn on a loopback socket, as a browser gets it. Every page is checked: its rows on a list
page (50, or the matches of a rare text), the task's spans on its page. p50/p95 per page
over ``--requests`` requests after 5 warm-up ones.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

from benchmarks.stats import summary
from core_agent.container import create_kernel
from core_agent.contracts.settings import AgentSettings
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.trace_viewer.approval_desk import ApprovalDesk
from core_agent.trace_viewer.pages import PAGE_SIZE, viewer_app
from core_agent.trace_viewer.server import listen
from providers.sqlite.database import connect
from shared.agent_protocol import ApprovalRequest, RiskLevel, TaskRequest, TaskStatus, TokenUsage

TARGET_MS = 300.0
SESSIONS = 100
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
PORT = 8765
TOKEN = "benchmark-token-0123456789abcdef"


def status_of(number: int) -> str:
    slot = number % 100
    if slot < 85:
        return "succeeded"
    if slot < 92:
        return "failed"
    if slot < 95:
        return "canceled"
    if slot < 99:
        return "running"
    return "waiting_approval"


def insert(path: Path, count: int, batch: int = 5000) -> None:
    """``count`` tasks created one second apart, and a pending request for each waiting one."""
    usage = TokenUsage(input_tokens=820, output_tokens=140, cost_usd=0.0012).model_dump_json()
    conn = connect(path)
    try:
        stamp = EPOCH.isoformat(timespec="microseconds")
        conn.executemany(
            "INSERT OR IGNORE INTO agent_sessions (id, created_at, updated_at) VALUES (?, ?, ?)",
            [(f"session-{s}", stamp, stamp) for s in range(SESSIONS)],
        )
        for low in range(0, count, batch):
            tasks, approvals = [], []
            for number in range(low, min(count, low + batch)):
                moment = EPOCH + timedelta(seconds=number)
                created = moment.isoformat(timespec="microseconds")
                status = status_of(number)
                text = (
                    f"summarise report {number} for the quarterly review"
                    if number % 3
                    else f"把第 {number} 号报告翻译成英文"
                )
                tasks.append(
                    (
                        f"task-{number:07d}",
                        f"session-{number % SESSIONS}",
                        f"trace-{number:07d}",
                        status,
                        "react",
                        TaskRequest(task=text).model_dump_json(),
                        json.dumps(f"answer {number}: revenue grew")
                        if status == "succeeded"
                        else None,
                        "it failed" if status == "failed" else None,
                        usage,
                        created,
                        created,
                    )
                )
                if status == "waiting_approval":
                    request = ApprovalRequest(
                        request_id=f"request-{number:07d}",
                        task_id=f"task-{number:07d}",
                        session_id=f"session-{number % SESSIONS}",
                        question="the plan failed repeatedly: carry on?",
                        risk=RiskLevel.HIGH,
                        created_at=moment,
                    )
                    approvals.append(
                        (
                            request.request_id,
                            request.task_id,
                            request.model_dump_json(),
                            created,
                        )
                    )
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO agent_tasks (id, session_id, trace_id, status, strategy,"
                " input_json, output_json, error_text, usage_json, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                tasks,
            )
            conn.executemany(
                "INSERT INTO agent_approvals (request_id, task_id, status, request_json,"
                " created_at) VALUES (?, ?, 'pending', ?, ?)",
                approvals,
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def cursor_after(kernel: AgentKernel, tasks: int) -> str:
    """The cursor of the page that starts after the newest ``tasks`` tasks."""
    cursor = None
    for _ in range(10):
        page = await kernel.page_tasks(cursor=cursor, limit=tasks // 10)
        assert page.next_cursor is not None
        cursor = page.next_cursor
    assert cursor is not None
    return cursor


async def time_page(
    client: httpx.AsyncClient, path: str, params: dict[str, str], requests: int, expect: str | int
) -> tuple[list[float], int]:
    """Request the page ``requests`` times; ``expect`` is a text it holds or its row count."""
    samples = []
    size = 0
    for index in range(requests + 5):
        start = time.perf_counter()
        response = await client.get(path, params={**params, "token": TOKEN})
        elapsed = (time.perf_counter() - start) * 1000.0
        assert response.status_code == 200, response.text[:500]
        if index >= 5:  # the first few warm the page cache and the templates
            samples.append(elapsed)
        size = len(response.content)
        if isinstance(expect, int):
            assert response.text.count('<tr class="task"') == expect, (path, params)
        else:
            assert expect in response.text, (path, params)
    return samples, size


async def measure(count: int, requests: int, data_dir: Path) -> list[dict[str, Any]]:
    settings = AgentSettings(data_dir=data_dir, recovery="off")
    async with create_kernel(settings) as kernel:
        started = time.perf_counter()
        await anyio.to_thread.run_sync(insert, settings.database_path, count)
        load_s = time.perf_counter() - started
        done = await kernel.execute_task(TaskRequest(task="What is 6 * 7 + 2 ** 10?"))
        assert done.status is TaskStatus.SUCCEEDED, done.error
        deep = await cursor_after(kernel, count // 2)
        rows = PAGE_SIZE
        async with anyio.create_task_group() as group:
            app = viewer_app(kernel, ApprovalDesk(kernel, group), token=TOKEN, port=PORT)
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(
                transport=transport, base_url=f"http://127.0.0.1:{PORT}"
            ) as client:
                pages: list[tuple[str, str, dict[str, str], str | int]] = [
                    ("first page", "/", {}, rows),
                    ("status=succeeded", "/", {"status": "succeeded"}, rows),
                    ("status=waiting_approval", "/", {"status": "waiting_approval"}, rows),
                    ("session", "/", {"session": "session-7"}, rows),
                    ("text, common (every task)", "/", {"q": "report"}, rows),
                    ("text, Chinese", "/", {"q": "翻译"}, rows),
                    ("text, rare (1 task: a whole scan)", "/", {"q": "report 4243 "}, 1),
                    (f"page after {count // 2:,} tasks", "/", {"cursor": deep}, rows),
                    (
                        "a task (its spans and events)",
                        f"/tasks/{done.task_id}",
                        {},
                        'data-kind="tool"',
                    ),
                    (f"approvals ({count // 100:,} waiting)", "/approvals", {}, 'class="approval"'),
                ]
                reports = []
                for name, path, params, expect in pages:
                    samples, size = await time_page(client, path, params, requests, expect)
                    reports.append(
                        {"page": name, "tasks": count, "html_bytes": size, "insert_s": load_s}
                        | summary(samples)
                    )
            # For reference: the same first page through uvicorn on a loopback socket, as
            # the browser gets it (HTTP parsing and the socket added).
            sock = listen(0)
            port = sock.getsockname()[1]
            app = viewer_app(kernel, ApprovalDesk(kernel, group), token=TOKEN, port=port)
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
            group.start_soon(server.serve, [sock])  # the socket listens already
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                samples, size = await time_page(client, "/", {}, requests, rows)
            reports.append(
                {"page": "first page over HTTP (uvicorn)", "tasks": count, "html_bytes": size}
                | summary(samples)
            )
            server.should_exit = True
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reports = anyio.run(measure, args.tasks, args.requests, Path(tmp) / "data")
    for report in reports:
        print(json.dumps({"benchmark": "ui_task_list", **report}, ensure_ascii=False))
    for report in reports:
        print(
            f"{report['page']}: p50 {report['p50_ms']:.1f} ms, p95 {report['p95_ms']:.1f} ms "
            f"({report['html_bytes']:,} bytes of HTML)"
        )
    first = reports[0]
    verdict = "meets" if first["p95_ms"] < TARGET_MS else "MISSES"
    print(
        f"first page of {args.tasks:,} tasks ({PAGE_SIZE} rows): p95 {first['p95_ms']:.1f} ms "
        f"({verdict} the < {TARGET_MS:g} ms target)"
    )


if __name__ == "__main__":
    main()
