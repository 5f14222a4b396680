"""``list_tasks(status=...)`` latency as the SQLite task store grows: 1k, 10k, 100k tasks.

The store is opened on a temporary database (so its migrations create the schema), then rows
are inserted straight into its ``agent_tasks`` table in batches, with a mix of statuses: 85 %
succeeded, 7 % failed, 3 % canceled, 5 % waiting for approval, and always 10 running, so that
a query returns as many rows at every size (50 succeeded, 50 waiting, 10 running) and only
the table's size changes. At each size ``list_tasks(status=..., limit=50)`` runs ``--queries``
times per status through the store's API (query, rows read, ``TaskState`` built); p50 and
p95 are printed, and the ratio of the largest size's p95 to the smallest's, which should
stay flat. The unfiltered ``list_tasks()`` is printed for reference.
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

from benchmarks.stats import summary
from providers.sqlite.database import connect
from providers.sqlite.task_store import SqliteTaskStore
from shared.agent_protocol import TaskRequest, TaskStatus, TokenUsage

TARGET_RATIO = 2.0
SESSIONS = 100
RUNNING = 10
STATUSES = (TaskStatus.SUCCEEDED, TaskStatus.WAITING_APPROVAL, TaskStatus.RUNNING, None)
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def status_of(number: int) -> str:
    slot = number % 100
    if slot < 85:
        return "succeeded"
    if slot < 92:
        return "failed"
    if slot < 95:
        return "canceled"
    return "waiting_approval"


def insert(path: Path, start: int, stop: int, batch: int = 5000) -> None:
    """Tasks ``start``..``stop - 1`` (created one second apart), in batches."""
    usage = TokenUsage(input_tokens=120, output_tokens=40).model_dump_json()
    conn = connect(path)
    try:
        if start == 0:
            stamp = EPOCH.isoformat(timespec="microseconds")
            conn.executemany(
                "INSERT INTO agent_sessions (id, created_at, updated_at) VALUES (?, ?, ?)",
                [(f"session-{s}", stamp, stamp) for s in range(SESSIONS)],
            )
        for low in range(start, stop, batch):
            rows = []
            for number in range(low, min(stop, low + batch)):
                created = (EPOCH + timedelta(seconds=number)).isoformat(timespec="microseconds")
                status = status_of(number)
                rows.append(
                    (
                        f"task-{number:07d}",
                        f"session-{number % SESSIONS}",
                        f"trace-{number:07d}",
                        status,
                        "react",
                        TaskRequest(task=f"summarise report {number}").model_dump_json(),
                        json.dumps(f"answer {number}") if status == "succeeded" else None,
                        "it failed" if status == "failed" else None,
                        usage,
                        created,
                        created,
                    )
                )
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO agent_tasks (id, session_id, trace_id, status, strategy,"
                " input_json, output_json, error_text, usage_json, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            conn.execute("COMMIT")
        if start == 0:  # the same few running tasks at every size
            conn.execute(
                "UPDATE agent_tasks SET status = 'running', output_json = NULL"
                " WHERE id IN (SELECT id FROM agent_tasks ORDER BY created_at LIMIT ?)",
                (RUNNING,),
            )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def time_queries(
    store: SqliteTaskStore, status: TaskStatus | None, queries: int
) -> tuple[list[float], int]:
    samples = []
    found = 0
    for index in range(queries + 5):
        start = time.perf_counter()
        tasks = await store.list_tasks(status=status, limit=50)
        elapsed = (time.perf_counter() - start) * 1000.0
        if index >= 5:  # the first few warm the page cache
            samples.append(elapsed)
        found = len(tasks)
        assert all(status is None or task.status is status for task in tasks)
    return samples, found


async def measure(sizes: list[int], queries: int, path: Path) -> list[dict[str, Any]]:
    schema = SqliteTaskStore(path)  # creates and migrates the schema
    reports = []
    inserted = 0
    for size in sizes:
        started = time.perf_counter()
        await anyio.to_thread.run_sync(insert, path, inserted, size)
        inserted = size
        load_s = time.perf_counter() - started
        store = SqliteTaskStore(path)
        try:
            for status in STATUSES:
                samples, found = await time_queries(store, status, queries)
                reports.append(
                    {
                        "tasks": size,
                        "status": status.value if status else "any",
                        "rows_returned": found,
                        "insert_s": load_s,
                        **summary(samples),
                    }
                )
        finally:
            await store.close()
    await schema.close()
    conn = connect(path)
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM agent_tasks WHERE status = ?"
            " ORDER BY created_at DESC, rowid DESC LIMIT 50",
            ("succeeded",),
        ).fetchall()
    finally:
        conn.close()
    print("query plan for a status filter: " + "; ".join(str(row[-1]) for row in plan))
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reports = anyio.run(measure, sorted(args.sizes), args.queries, Path(tmp) / "tasks.db")
    for report in reports:
        print(json.dumps({"benchmark": "list_tasks_scaling", **report}))
    smallest, largest = min(args.sizes), max(args.sizes)
    for status in STATUSES:
        name = status.value if status else "any"
        rows = {r["tasks"]: r for r in reports if r["status"] == name}
        ratio = rows[largest]["p95_ms"] / rows[smallest]["p95_ms"]
        assert rows[largest]["rows_returned"] == rows[smallest]["rows_returned"]
        figures = ", ".join(
            f"{size:,}: p50 {rows[size]['p50_ms']:.3f} / p95 {rows[size]['p95_ms']:.3f} ms"
            for size in sorted(rows)
        )
        check = (
            ""
            if status is None
            else f" ({'meets' if ratio < TARGET_RATIO else 'MISSES'} the < {TARGET_RATIO:g} target)"
        )
        print(
            f"list_tasks(status={name}, limit=50), {rows[largest]['rows_returned']} rows: "
            f"{figures}; p95 ratio {largest:,}/{smallest:,} = {ratio:.2f}{check}"
        )


if __name__ == "__main__":
    main()
