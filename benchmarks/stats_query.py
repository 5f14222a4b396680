"""``core-agent stats`` on a large store: 10k tasks and 100k spans by default.

The SQLite task and trace stores are opened on a temporary database (so their migrations
create the schema), then rows are inserted straight into ``agent_tasks``, ``agent_traces``
and ``agent_approvals`` in batches: ``--tasks`` tasks in 100 sessions, created one second
apart (85 % succeeded, 7 % failed, 3 % canceled, 5 % waiting for a human), each with 10
spans (a route, a recall, the task, three model calls on two models, two tool calls on three
tools with some failures and refusals, two policy checks) whose model and tool spans carry
``--payload-bytes`` of recorded content, and an approval request for every waiting task and
every tenth other one (approved, denied, or denied by the kernel).

Then ``collect_metrics`` (what ``AgentKernel.metrics`` and the command run) is timed through
the stores' API for three scopes: every task, the newest 10 % (``--since``), and one session
(``--session``); ``--repetitions`` times each after a warm-up, p50 and p95 of the wall time
printed, and of the process's CPU time (which a loaded machine moves less). Every
answer is checked against what was inserted (task and span counts per scope).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from benchmarks.list_tasks_scaling import status_of  # the same mix of outcomes
from benchmarks.stats import summary
from core_agent.contracts.metrics import AgentMetrics, MetricsScope
from core_agent.observability.metrics import collect_metrics
from providers.sqlite.database import connect
from providers.sqlite.task_store import SqliteTaskStore
from providers.sqlite.trace_store import SqliteTraceStore
from shared.agent_protocol import TaskRequest, TokenUsage

TARGET_MS = 1000.0
SESSIONS = 100
SPANS_PER_TASK = 10
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
MODELS = ("openai/gpt-4o-mini", "anthropic/claude-3-5-haiku")
TOOLS = ("calculator", "read_file", "run_command")


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")


def task_rows(number: int, rng: random.Random, pad: str) -> dict[str, list[tuple[Any, ...]]]:
    task_id, trace_id = f"task-{number:07d}", f"trace-{number:07d}"
    created = EPOCH + timedelta(seconds=number)
    status = status_of(number)
    usage = TokenUsage(input_tokens=600, output_tokens=120, cost_usd=0.0003).model_dump_json()
    task = (
        task_id,
        f"session-{number % SESSIONS}",
        trace_id,
        status,
        "react",
        TaskRequest(task=f"summarise report {number}").model_dump_json(),
        json.dumps(f"answer {number}") if status == "succeeded" else None,
        "it failed" if status == "failed" else None,
        usage,
        iso(created),
        iso(created),
    )
    spans: list[tuple[Any, ...]] = []
    clock = created

    def span(
        kind: str,
        name: str,
        latency_ms: float,
        *,
        status: str = "ok",
        tokens: tuple[int, int] | None = None,
        cost: float | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        nonlocal clock
        ended = clock + timedelta(milliseconds=latency_ms)
        spans.append(
            (
                f"{task_id}-{len(spans)}",
                trace_id,
                task_id,
                None,
                name,
                kind,
                status,
                iso(clock),
                iso(ended),
                latency_ms,
                tokens[0] if tokens else None,
                tokens[1] if tokens else None,
                cost,
                "failed" if status == "error" else None,
                json.dumps(payload or {}),
            )
        )
        clock = ended

    span("planning", "route", rng.uniform(0.2, 1.0), payload={"strategy": "react"})
    span("memory", "memory.recall", rng.uniform(1, 20))
    span("task", "task", rng.uniform(500, 5000), tokens=(600, 120), cost=0.0003)
    for turn in range(3):
        model = MODELS[(number + turn) % 3 == 0]
        failed = rng.random() < 0.01
        span(
            "llm",
            model,
            rng.lognormvariate(6.5, 0.6),
            status="error" if failed else "ok",
            tokens=None if failed else (200, 40),
            cost=None if failed else 0.0001,
            payload={"finish_reason": "stop", "tool_calls": [], "content": pad},
        )
    for call in range(2):
        tool = TOOLS[(number + call) % len(TOOLS)]
        roll = rng.random()
        if roll < 0.05:
            outcome, payload = "error", {"error_type": "ToolExecutionError"}
        elif roll < 0.07:
            outcome, payload = "error", {"error_type": "ApprovalDeniedError"}
        else:
            outcome, payload = "ok", {}
        span(
            "tool",
            tool,
            rng.lognormvariate(3, 1),
            status=outcome,
            payload={"call_id": f"c{call}", "arguments": "{}", "content": pad, **payload},
        )
        span("policy", tool, rng.uniform(0.05, 0.3), payload={"risk": "low"})
    approvals: list[tuple[Any, ...]] = []
    if status == "waiting_approval" or number % 10 == 0:
        requested = created + timedelta(seconds=0.5)
        request = json.dumps({"request_id": f"req-{number}", "task_id": task_id})
        if status == "waiting_approval":
            approvals.append(
                (f"req-{number}", task_id, "pending", request, None, iso(requested), None)
            )
        else:
            verdict = ("approved", "denied", "kernel")[(number // 10) % 3]
            decision = json.dumps(
                {
                    "approved": verdict == "approved",
                    "decided_by": "core-agent" if verdict == "kernel" else "cli",
                }
            )
            decided = requested + timedelta(seconds=rng.uniform(2, 120))
            approvals.append(
                (
                    f"req-{number}",
                    task_id,
                    "approved" if verdict == "approved" else "denied",
                    request,
                    decision,
                    iso(requested),
                    iso(decided),
                )
            )
    return {"tasks": [task], "spans": spans, "approvals": approvals}


def insert(path: Path, tasks: int, payload_bytes: int, batch: int = 2000) -> None:
    rng = random.Random(7)
    pad = "x" * payload_bytes
    conn = connect(path)
    try:
        stamp = iso(EPOCH)
        conn.executemany(
            "INSERT INTO agent_sessions (id, created_at, updated_at) VALUES (?, ?, ?)",
            [(f"session-{s}", stamp, stamp) for s in range(SESSIONS)],
        )
        for low in range(0, tasks, batch):
            rows: dict[str, list[tuple[Any, ...]]] = {"tasks": [], "spans": [], "approvals": []}
            for number in range(low, min(tasks, low + batch)):
                for table, made in task_rows(number, rng, pad).items():
                    rows[table].extend(made)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO agent_tasks (id, session_id, trace_id, status, strategy,"
                " input_json, output_json, error_text, usage_json, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                rows["tasks"],
            )
            conn.executemany(
                "INSERT INTO agent_traces (id, trace_id, task_id, parent_id, span, kind, status,"
                " started_at, ended_at, latency_ms, token_in, token_out, cost_usd, error_text,"
                " payload_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows["spans"],
            )
            conn.executemany(
                "INSERT INTO agent_approvals (request_id, task_id, status, request_json,"
                " decision_json, created_at, decided_at) VALUES (?,?,?,?,?,?,?)",
                rows["approvals"],
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def check(metrics: AgentMetrics, tasks: int) -> None:
    assert metrics.tasks.total == tasks, (metrics.tasks.total, tasks)
    spans = sum(kind.latency.count for kind in metrics.latency_by_kind)
    assert spans == tasks * SPANS_PER_TASK, (spans, tasks)
    assert sum(model.calls for model in metrics.models) == tasks * 3
    assert sum(tool.calls for tool in metrics.tools) == tasks * 2


async def measure(tasks: int, payload_bytes: int, repetitions: int, path: Path) -> list[dict]:
    schema = SqliteTaskStore(path)  # creates and migrates the schema
    await schema.close()
    started = time.perf_counter()
    await anyio.to_thread.run_sync(insert, path, tasks, payload_bytes)
    insert_s = time.perf_counter() - started
    newest = tasks // 10
    scopes = {
        "all tasks": (MetricsScope(), tasks),
        f"--since (newest {newest:,})": (
            MetricsScope(since=EPOCH + timedelta(seconds=tasks - newest)),
            newest,
        ),
        "--session (one of 100)": (
            MetricsScope(session_id="session-7"),
            len(range(7, tasks, SESSIONS)),
        ),
    }
    task_store, trace_store = SqliteTaskStore(path), SqliteTraceStore(path)
    reports = []
    try:
        for label, (scope, expected) in scopes.items():
            samples: dict[str, list[float]] = {"total": [], "tasks": [], "spans": [], "cpu": []}
            for index in range(repetitions + 1):
                start = time.perf_counter()
                await task_store.task_metrics(scope)
                middle = time.perf_counter()
                await trace_store.span_metrics(scope)
                end = time.perf_counter()
                cpu = time.process_time()  # every thread's: the query runs in a worker
                metrics = await collect_metrics(task_store, trace_store, scope)
                total = (time.perf_counter() - end) * 1000.0
                cpu_ms = (time.process_time() - cpu) * 1000.0
                check(metrics, expected)
                if index:  # the first warms the page cache
                    samples["tasks"].append((middle - start) * 1000.0)
                    samples["spans"].append((end - middle) * 1000.0)
                    samples["total"].append(total)
                    samples["cpu"].append(cpu_ms)
            reports.append(
                {
                    "scope": label,
                    "tasks_in_scope": expected,
                    "spans_in_scope": expected * SPANS_PER_TASK,
                    "task_metrics": summary(samples["tasks"]),
                    "span_metrics": summary(samples["spans"]),
                    "cpu": summary(samples["cpu"]),
                    **summary(samples["total"]),
                }
            )
    finally:
        await task_store.close()
        await trace_store.close()
    size_mb = (await anyio.Path(path).stat()).st_size / 1e6
    print(
        f"{tasks:,} tasks, {tasks * SPANS_PER_TASK:,} spans, payload {payload_bytes} B on model "
        f"and tool spans: database {size_mb:.0f} MB, inserted in {insert_s:.1f} s"
    )
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--payload-bytes", type=int, default=500)
    parser.add_argument("--repetitions", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reports = anyio.run(
            measure, args.tasks, args.payload_bytes, args.repetitions, Path(tmp) / "stats.db"
        )
    for report in reports:
        print(json.dumps({"benchmark": "stats_query", **report}))
    for report in reports:
        verdict = "meets" if report["p95_ms"] < TARGET_MS else "MISSES"
        print(
            f"stats over {report['scope']} ({report['tasks_in_scope']:,} tasks, "
            f"{report['spans_in_scope']:,} spans): p50 {report['p50_ms']:.1f} / p95 "
            f"{report['p95_ms']:.1f} ms (task store p50 {report['task_metrics']['p50_ms']:.1f}, "
            f"trace store p50 {report['span_metrics']['p50_ms']:.1f} ms; CPU p50 "
            f"{report['cpu']['p50_ms']:.1f} ms); {verdict} the "
            f"< {TARGET_MS:g} ms target"
        )


if __name__ == "__main__":
    main()
