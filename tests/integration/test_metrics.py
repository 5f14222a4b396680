"""``AgentKernel.metrics`` over tasks whose outcomes are known: real SQLite, scripted model.

The tasks are ``support.stats_tasks``'s. The counts and rates are known from what they do;
latencies and waits are read back from their spans and events and the nearest-rank
percentiles computed here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from core_agent.contracts.errors import SessionNotFoundError, UsageError
from core_agent.contracts.metrics import AgentMetrics, nearest_rank
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import Span
from shared.agent_protocol import TaskStatus
from support.stats_tasks import MODEL, StatsData, kernel_for, run_tasks


@pytest.fixture(scope="module")
def stats_data(tmp_path_factory: pytest.TempPathFactory) -> StatsData:
    data_dir = tmp_path_factory.mktemp("stats") / "data"
    settings = AgentSettings(data_dir=data_dir, model_max_retries=0, recovery="off")
    return anyio.run(run_tasks, settings)


def metrics_of(data: StatsData, **scope: object) -> AgentMetrics:
    async def read() -> AgentMetrics:
        async with kernel_for(data.settings) as kernel:
            return await kernel.metrics(**scope)  # type: ignore[arg-type]

    return anyio.run(read)


def percentiles(values: list[float]) -> dict[str, object]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50_ms": round(nearest_rank(ordered, 50), 3) if ordered else None,  # type: ignore[arg-type]
        "p95_ms": round(nearest_rank(ordered, 95), 3) if ordered else None,  # type: ignore[arg-type]
    }


def expected_latencies(spans: list[Span]) -> dict[str, dict[str, object]]:
    kinds: dict[str, list[float]] = {}
    for span in spans:
        kinds.setdefault(span.kind, []).append(span.latency_ms)
    return {kind: percentiles(values) for kind, values in sorted(kinds.items())}


def test_counts_rates_and_percentiles_of_every_task(stats_data: StatsData) -> None:
    metrics = metrics_of(stats_data)
    report = metrics.model_dump(mode="json")

    assert report["tasks"] == {
        "by_status": {
            "queued": 0,
            "running": 0,
            "waiting_approval": 0,
            "succeeded": 5,
            "failed": 1,
            "canceled": 1,
        },
        "unknown_status": {},
        "total": 7,
    }
    # Eleven model turns answered (the canceled task's one, the failed task's none).
    assert report["tokens"]["input"] == 1100 and report["tokens"]["output"] == 110
    assert report["tokens"]["cost_usd"] == pytest.approx(0.011)

    spans = [span for task_spans in stats_data.spans.values() for span in task_spans]
    llm = [span.latency_ms for span in spans if span.kind == "llm"]
    (model,) = report["models"]
    assert model == {
        "model": MODEL,
        "calls": 12,
        "errors": 1,
        "input_tokens": 1100,
        "output_tokens": 110,
        "cost_usd": pytest.approx(0.011),
        "latency": percentiles(llm),
    }
    assert {k["kind"]: k["latency"] for k in report["latency_by_kind"]} == expected_latencies(spans)

    def tool_latency(name: str) -> dict[str, object]:
        return percentiles(
            [
                s.latency_ms
                for s in spans
                if s.kind == "tool" and s.name == name and "suspended" not in s.attributes
            ]
        )

    assert report["tools"] == [
        # Approved (ran), denied by the person, refused by the kernel; the call of the
        # canceled task never ran nor was refused, and each suspension counts once.
        {
            "tool": "launch",
            "calls": 3,
            "errors": 0,
            "refused": 2,
            "latency": tool_latency("launch"),
            "success_rate": 1.0,
        },
        {
            "tool": "add",
            "calls": 1,
            "errors": 0,
            "refused": 0,
            "latency": tool_latency("add"),
            "success_rate": 1.0,
        },
        {
            "tool": "flaky",
            "calls": 1,
            "errors": 1,
            "refused": 0,
            "latency": tool_latency("flaky"),
            "success_rate": 0.0,
        },
    ]
    assert len(stats_data.waits_ms) == 3  # approved, denied, denied by the kernel
    assert report["approvals"] == {
        "requested": 4,
        "approved": 1,
        "denied": 1,
        "expired": 2,  # the kernel's denial, and the request of the canceled task
        "pending": 0,
        "wait": percentiles(stats_data.waits_ms),
        "approved_rate": 0.25,
        "denied_rate": 0.25,
        "expired_rate": 0.5,
    }


def test_since_counts_the_tasks_created_after_a_moment(stats_data: StatsData) -> None:
    metrics = metrics_of(stats_data, since=stats_data.mark)

    assert metrics.scope.since == stats_data.mark
    assert metrics.tasks.total == 5
    assert metrics.tasks.by_status[TaskStatus.SUCCEEDED] == 3
    assert [t.tool for t in metrics.tools] == ["launch"]
    assert metrics.approvals.requested == 4
    later = [s for task_id in stats_data.task_ids[2:] for s in stats_data.spans[task_id]]
    assert {k.kind: k.latency.model_dump() for k in metrics.latency_by_kind} == expected_latencies(
        later
    )
    assert metrics.tokens.input == 700  # 7 answered turns of the 5 tasks

    future = metrics_of(stats_data, since=datetime.now(UTC) + timedelta(days=1))
    assert future.tasks.total == 0 and future.models == [] and future.approvals.requested == 0


def test_session_counts_its_own_tasks(stats_data: StatsData) -> None:
    metrics = metrics_of(stats_data, session_id="alpha")

    assert metrics.tasks.total == 2
    assert [(t.tool, t.calls, t.errors) for t in metrics.tools] == [("add", 1, 0), ("flaky", 1, 1)]
    assert metrics.approvals.requested == 0 and metrics.approvals.approved_rate is None
    first = [s for task_id in stats_data.task_ids[:2] for s in stats_data.spans[task_id]]
    assert {k.kind: k.latency.model_dump() for k in metrics.latency_by_kind} == expected_latencies(
        first
    )
    # Both filters at once: the session's tasks created since the mark (none).
    assert metrics_of(stats_data, session_id="alpha", since=stats_data.mark).tasks.total == 0


def test_misuse_is_refused_with_a_reason(stats_data: StatsData) -> None:
    with pytest.raises(SessionNotFoundError):
        metrics_of(stats_data, session_id="no-such-session")
    with pytest.raises(UsageError, match="time zone"):
        metrics_of(stats_data, since=datetime(2026, 1, 1))


def test_the_sync_facade_answers_the_same(stats_data: StatsData) -> None:
    from core_agent.kernel.sync_kernel import SyncKernel

    with SyncKernel(kernel_for(stats_data.settings)) as kernel:
        assert kernel.metrics(session_id="alpha") == metrics_of(stats_data, session_id="alpha")


def test_without_content_the_counts_are_the_same(
    stats_data: StatsData, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The store keeps only attributes free of content then: what stats reads must be among them.
    data_dir = tmp_path_factory.mktemp("stats-no-content") / "data"
    settings = AgentSettings(
        data_dir=data_dir, model_max_retries=0, recovery="off", trace_content=False
    )
    without = metrics_of(anyio.run(run_tasks, settings)).model_dump(mode="json")
    full = metrics_of(stats_data).model_dump(mode="json")

    def counts(report: dict[str, object]) -> dict[str, object]:
        def drop_latency(rows: object) -> object:
            assert isinstance(rows, list)
            return [{k: v for k, v in row.items() if k != "latency"} for row in rows]

        return {
            "tasks": report["tasks"],
            "tokens": report["tokens"],
            "models": drop_latency(report["models"]),
            "tools": drop_latency(report["tools"]),
            "kinds": sorted(str(k["kind"]) for k in report["latency_by_kind"]),  # type: ignore[attr-defined, index]
        }

    assert counts(without) == counts(full)
