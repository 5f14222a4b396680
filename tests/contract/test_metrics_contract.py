"""``task_metrics`` and ``span_metrics``: what each number counts, on SQLite and on the fakes.

The same tasks, spans and approval requests, with chosen latencies, tokens and decision
times, are written through each backend's API; both must give the numbers worked out by
hand here, with no scope (every span read) and with a scope that selects every task (the
spans read through their tasks).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core_agent.contracts.metrics import AgentMetrics, MetricsScope, nearest_rank
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore, Span
from core_agent.observability.metrics import collect_metrics
from fakes.stores import FakeTaskStore, FakeTraceStore
from providers.sqlite.task_store import SqliteTaskStore
from providers.sqlite.trace_store import SqliteTraceStore
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    RiskLevel,
    TaskQueued,
    TaskRequest,
    TaskState,
    TaskStatus,
)

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BULK = [float(ms) for ms in range(101, 122)]  # 21 calls of one tool: p50 is the 11th, p95 the 20th


@pytest.fixture(params=["sqlite", "fake"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple]:
    if request.param == "sqlite":
        tasks: ITaskStore = SqliteTaskStore(tmp_path / "m.db")
        traces: ITraceStore = SqliteTraceStore(tmp_path / "m.db")
    else:
        tasks = FakeTaskStore()
        traces = FakeTraceStore(tasks=tasks)  # type: ignore[arg-type]
    await fill(tasks, traces)
    yield tasks, traces
    await tasks.close()
    await traces.close()


async def fill(tasks: ITaskStore, traces: ITraceStore) -> None:
    seq = {"t1": 1, "t2": 1, "t3": 1}

    async def task(task_id: str, session: str, created: datetime, status: TaskStatus) -> None:
        state = TaskState(
            task_id=task_id,
            session_id=session,
            trace_id=f"trace-{task_id}",
            status=TaskStatus.QUEUED,
            request=TaskRequest(task=task_id),
            created_at=created,
            updated_at=created,
        )
        queued = TaskQueued(
            event_id=f"{task_id}-1",
            task_id=task_id,
            seq=1,
            occurred_at=created,
            session_id=session,
            trace_id=state.trace_id,
            request=state.request,
        )
        await tasks.create_task(state, queued)
        await tasks.transition(task_id, from_status=TaskStatus.QUEUED, to_status=status)

    count = 0

    async def span(task_id: str, kind: str, name: str, ms: float, **fields: object) -> None:
        nonlocal count
        count += 1
        start = T0 + timedelta(seconds=count)
        await traces.record(
            Span(
                span_id=f"s{count}",
                trace_id=f"trace-{task_id}",
                task_id=task_id,
                kind=kind,  # type: ignore[arg-type]
                name=name,
                started_at=start,
                ended_at=start + timedelta(milliseconds=ms),
                **fields,  # type: ignore[arg-type]
            )
        )

    async def approval(
        task_id: str, request_id: str, wait_s: float | None, approved: bool, by: str = "cli"
    ) -> None:
        asked = T0 + timedelta(days=1, seconds=len(request_id))
        request = ApprovalRequest(
            request_id=request_id,
            task_id=task_id,
            session_id="s",
            risk=RiskLevel.HIGH,
            created_at=asked,
        )
        seq[task_id] += 1
        await tasks.append_event(
            ApprovalRequested(
                event_id=f"{request_id}-asked",
                task_id=task_id,
                seq=seq[task_id],
                occurred_at=asked,
                request=request,
            )
        )
        if wait_s is None:
            return
        seq[task_id] += 1
        await tasks.append_event(
            ApprovalResolved(
                event_id=f"{request_id}-decided",
                task_id=task_id,
                seq=seq[task_id],
                occurred_at=asked + timedelta(seconds=wait_s),
                decision=ApprovalDecision(request_id=request_id, approved=approved, decided_by=by),
            )
        )

    await task("t1", "s1", T0, TaskStatus.SUCCEEDED)
    await task("t2", "s2", T0 + timedelta(hours=1), TaskStatus.WAITING_APPROVAL)
    await task("t3", "s2", T0 + timedelta(hours=2), TaskStatus.CANCELED)

    # The root span and a run's repeat their calls' usage, an attempt's its call's: none counted.
    await span("t1", "task", "task", 1000, tokens_in=300, tokens_out=30, cost_usd=0.3)
    await span("t1", "run", "react", 900, tokens_in=300, tokens_out=30, cost_usd=0.3)
    await span("t1", "llm", "model-a", 100, tokens_in=100, tokens_out=10, cost_usd=0.1)
    await span("t1", "llm", "model-a", 200, tokens_in=100, tokens_out=10, cost_usd=0.1)
    await span(
        "t1",
        "llm",
        "model-a",
        300,
        tokens_in=100,
        tokens_out=10,
        attributes={"fallback_model": "model-b"},  # its price unknown: no cost
    )
    await span("t1", "llm_attempt", "model-a #2", 50, tokens_in=50, tokens_out=5, cost_usd=0.05)
    await span("t1", "memory", "memory.compaction", 60, tokens_in=40, tokens_out=4, cost_usd=0.04)
    await span("t1", "tool", "calc", 10)
    await span(
        "t1", "tool", "calc", 20, status="error", attributes={"error_type": "ToolExecutionError"}
    )
    await span(
        "t1", "tool", "calc", 30, status="error", attributes={"error_type": "ApprovalDeniedError"}
    )
    await span("t1", "tool", "calc", 1, attributes={"suspended": "waiting for a human"})
    for ms in BULK:
        await span("t1", "tool", "bulk", ms)
    await span("t2", "llm", "model-a", 400, tokens_in=100, tokens_out=10, cost_usd=0.1)
    await span("t2", "tool", "search", 5)

    await approval("t2", "r2", None, False)  # its task still waits: pending
    await approval("t3", "r3", None, False)  # its task was canceled while it waited: expired
    await approval("t3", "r4", 1.5, True)
    await approval("t3", "r5", 2.5, False)
    await approval("t3", "r6", 10.0, False, by="core-agent")  # no answer in time: expired


def latency(count: int, p50: float | None, p95: float | None) -> dict[str, object]:
    return {"count": count, "p50_ms": p50, "p95_ms": p95}


EVERYTHING = {
    "tasks": {
        "by_status": {
            "queued": 0,
            "running": 0,
            "waiting_approval": 1,
            "succeeded": 1,
            "failed": 0,
            "canceled": 1,
        },
        "unknown_status": {},
        "total": 3,
    },
    "tokens": {"input": 440, "output": 44, "cost_usd": pytest.approx(0.34)},
    "latency_by_kind": [
        {"kind": "llm", "latency": latency(4, 200.0, 400.0)},
        {"kind": "llm_attempt", "latency": latency(1, 50.0, 50.0)},
        {"kind": "memory", "latency": latency(1, 60.0, 60.0)},
        {"kind": "run", "latency": latency(1, 900.0, 900.0)},
        {"kind": "task", "latency": latency(1, 1000.0, 1000.0)},
        # 1, 5, 10, 20, 30, 101..121: the 13th of 26 and the 25th.
        {"kind": "tool", "latency": latency(26, 108.0, 120.0)},
    ],
    "models": [
        {
            "model": "model-a",
            "calls": 3,
            "errors": 0,
            "input_tokens": 300,
            "output_tokens": 30,
            "cost_usd": pytest.approx(0.3),
            "latency": latency(3, 200.0, 400.0),
        },
        {
            "model": "model-b",
            "calls": 1,
            "errors": 0,
            "input_tokens": 100,
            "output_tokens": 10,
            "cost_usd": None,
            "latency": latency(1, 300.0, 300.0),
        },
    ],
    "tools": [
        {
            "tool": "bulk",
            "calls": 21,
            "errors": 0,
            "refused": 0,
            "latency": latency(21, 111.0, 120.0),
            "success_rate": 1.0,
        },
        {
            "tool": "calc",
            "calls": 3,
            "errors": 1,
            "refused": 1,
            "latency": latency(3, 20.0, 30.0),
            "success_rate": 0.5,
        },
        {
            "tool": "search",
            "calls": 1,
            "errors": 0,
            "refused": 0,
            "latency": latency(1, 5.0, 5.0),
            "success_rate": 1.0,
        },
    ],
    "approvals": {
        "requested": 5,
        "approved": 1,
        "denied": 1,
        "expired": 2,
        "pending": 1,
        "wait": latency(3, 2500.0, 10000.0),
        "approved_rate": 0.2,
        "denied_rate": 0.2,
        "expired_rate": 0.4,
    },
}


async def report(stores: tuple, **scope: object) -> dict[str, object]:
    metrics: AgentMetrics = await collect_metrics(*stores, MetricsScope(**scope))
    return metrics.model_dump(mode="json", exclude={"scope"})


async def test_every_number_of_every_task(stores: tuple) -> None:
    assert await report(stores) == EVERYTHING


async def test_a_scope_of_every_task_agrees_with_no_scope(stores: tuple) -> None:
    assert await report(stores, since=T0 - timedelta(days=1)) == EVERYTHING


async def test_since_leaves_out_the_tasks_created_before(stores: tuple) -> None:
    later = await report(stores, since=T0 + timedelta(minutes=30))

    assert later["tasks"]["total"] == 2  # type: ignore[index]
    assert later["tokens"] == {"input": 100, "output": 10, "cost_usd": pytest.approx(0.1)}
    assert later["latency_by_kind"] == [
        {"kind": "llm", "latency": latency(1, 400.0, 400.0)},
        {"kind": "tool", "latency": latency(1, 5.0, 5.0)},
    ]
    assert [t["tool"] for t in later["tools"]] == ["search"]  # type: ignore[index]
    assert later["approvals"] == EVERYTHING["approvals"]


async def test_a_session_counts_its_own_tasks(stores: tuple) -> None:
    first = await report(stores, session_id="s1")

    assert first["tasks"]["by_status"]["succeeded"] == 1  # type: ignore[index]
    assert first["tasks"]["total"] == 1  # type: ignore[index]
    model_a, model_b = first["models"]  # type: ignore[misc]
    assert (model_a["model"], model_a["calls"], model_a["latency"]) == (
        "model-a",
        2,
        latency(2, 100.0, 200.0),
    )
    assert model_b == EVERYTHING["models"][1]  # type: ignore[index]
    assert first["approvals"]["requested"] == 0  # type: ignore[index]
    assert first["approvals"]["wait"] == latency(0, None, None)  # type: ignore[index]
    nothing = await report(stores, session_id="s1", since=T0 + timedelta(minutes=30))
    assert nothing["tasks"]["total"] == 0 and nothing["tools"] == []  # type: ignore[index]


async def test_an_empty_store_reports_zeros() -> None:
    tasks = FakeTaskStore()
    metrics = await collect_metrics(tasks, FakeTraceStore(tasks=tasks), MetricsScope())
    assert metrics.tasks.total == 0 and metrics.tokens.cost_usd is None
    assert metrics.approvals.approved_rate is None


def test_nearest_rank_picks_a_measured_value() -> None:
    assert nearest_rank([], 50) is None
    assert nearest_rank([7.0], 95) == 7.0
    assert [nearest_rank([1.0, 2.0, 3.0, 4.0], p) for p in (50, 95)] == [2.0, 4.0]
    twenty = [float(n) for n in range(1, 21)]
    assert [nearest_rank(twenty, p) for p in (50, 95)] == [10.0, 19.0]


def test_the_refusals_counted_are_the_ones_the_react_loop_writes() -> None:
    from core_agent.contracts.metrics import REFUSED_ERROR_TYPES
    from core_agent.orchestration.react_loop import KERNEL_REFUSALS

    assert REFUSED_ERROR_TYPES == KERNEL_REFUSALS
