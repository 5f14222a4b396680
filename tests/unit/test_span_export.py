"""Every stored span also goes to the span exporter, and the exporter never holds a task up."""

import logging
from datetime import UTC, datetime

import pytest
from dependency_injector import providers

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.trace_store import Span
from core_agent.observability.span_export import ExportingTraceStore, SpanExportQueue
from core_agent.observability.tracer import new_span_id, new_trace_id
from core_agent.tooling.registry import ToolRegistry
from fakes.span_exporters import FakeSpanExporter
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus
from support.database_faults import refuse_inserts

pytestmark = pytest.mark.anyio


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return {"capital_fr": "Paris"}.get(key, "unknown")


def kernel_exporting_to(container: KernelContainer, exporter: FakeSpanExporter):
    container.span_exporter.override(providers.Object(exporter))
    container.tool_registry.override(ToolRegistry([lookup]))
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [
                ScriptedTurn(
                    tool_calls=[ScriptedToolCall(name="lookup", arguments={"key": "capital_fr"})]
                ),
                ScriptedTurn(content="It is Paris."),
            ]
        )
    )
    return container.kernel()


async def test_the_collector_gets_the_spans_the_trace_store_keeps(container) -> None:
    exporter = FakeSpanExporter()
    kernel = kernel_exporting_to(container, exporter)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        stored = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED
    # Closing the kernel sends what was still queued, then closes the exporter.
    assert exporter.closed
    assert sorted(s.span_id for s in exporter.spans) == sorted(s.span_id for s in stored)
    assert {s.kind for s in exporter.spans} >= {"task", "llm", "tool"}


async def test_a_span_the_database_left_out_is_never_sent(container, settings) -> None:
    """Export follows the commit: a root span whose write failed (the task's ending stands
    without it) is not sent, and neither is any span of a step before the step commits."""
    exporter = FakeSpanExporter()
    kernel = kernel_exporting_to(container, exporter)
    async with kernel:
        await refuse_inserts(
            settings.database_path, "no_roots", "agent_traces", "NEW.kind = 'task'"
        )
        result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        stored = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED
    assert "task" not in {s.kind for s in stored} and {"llm", "tool"} <= {s.kind for s in stored}
    assert sorted(s.span_id for s in exporter.spans) == sorted(s.span_id for s in stored)


async def test_a_collector_that_does_not_answer_does_not_hold_the_task(container) -> None:
    exporter = FakeSpanExporter()
    exporter.block()
    kernel = kernel_exporting_to(container, exporter)
    async with kernel:
        first = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        assert exporter.entered.wait(30)  # the first batch went out, and is not answered
        second = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        assert first.status is second.status is TaskStatus.SUCCEEDED
        assert not exporter.batches  # still unanswered: the second task did not wait for it
        exporter.unblock()
        stored = [*await kernel.task_spans(first.task_id), *await kernel.task_spans(second.task_id)]
    assert len(exporter.spans) == len(stored)


async def test_a_failing_collector_fails_no_task_and_is_reported_once(container, caplog) -> None:
    exporter = FakeSpanExporter()
    exporter.fail = True
    kernel = kernel_exporting_to(container, exporter)
    async with kernel:
        first = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        second = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        stored = await kernel.task_spans(second.task_id)
    assert first.status is second.status is TaskStatus.SUCCEEDED
    assert stored  # the local trace is whole
    warnings = [r.getMessage() for r in caplog.records if "were not sent" in r.getMessage()]
    assert exporter.calls >= 1
    assert len(warnings) == 1, warnings
    assert "fake://collector" in warnings[0] and "503" in warnings[0]


async def test_spans_past_the_queue_are_dropped_and_counted(container, caplog) -> None:
    exporter = FakeSpanExporter()
    exporter.block()
    container.settings.override(container.settings().model_copy(update={"span_export_queue": 2}))
    kernel = kernel_exporting_to(container, exporter)
    async with kernel:
        await kernel.execute_task(TaskRequest(task="Capital of France?"))
        assert exporter.entered.wait(30)  # the collector holds the first batch...
        result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        store = container.exporting_trace_store()
        assert isinstance(store, ExportingTraceStore)
        exports: SpanExportQueue = store.exports
        assert result.status is TaskStatus.SUCCEEDED  # ...and the next task's spans overflow
        assert exports.dropped > 0
        exporter.unblock()
    held = [r for r in caplog.records if "falling behind" in r.getMessage()]
    assert len(held) == 1 and held[0].levelno == logging.WARNING
    assert any("were not sent" in r.getMessage() for r in caplog.records)


async def test_without_a_collector_spans_stay_on_this_machine(container) -> None:
    assert container.settings().span_exporter_name is None
    assert container.span_exporter() is None
    assert not isinstance(container.exporting_trace_store(), ExportingTraceStore)


async def test_an_unknown_exporter_name_leaves_export_off_with_a_warning(container, caplog) -> None:
    settings = container.settings().model_copy(update={"span_exporter": "zipkin_nope"})
    container.settings.override(settings)
    kernel = container.kernel()
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="What is 2 + 2?"))
    assert result.status is TaskStatus.SUCCEEDED
    warning = next(r for r in caplog.records if "spans are not exported" in r.getMessage())
    assert warning.levelno == logging.WARNING
    assert "zipkin_nope" in warning.getMessage()


def test_closing_waits_a_bounded_time_for_a_collector_that_does_not_answer(caplog) -> None:
    exporter = FakeSpanExporter()
    exporter.block()
    exports = SpanExportQueue(exporter)
    exports.submit(finished_span())
    assert exporter.entered.wait(30)
    exports.close(timeout_s=0.05)  # returns although the export still waits
    assert exporter.closed  # which is what makes a real exporter give up its retries
    assert any("did not finish within" in r.getMessage() for r in caplog.records)
    exports.submit(finished_span())  # after close: ignored, no thread started again
    assert exporter.calls == 1


def finished_span() -> Span:
    now = datetime.now(UTC)
    return Span(
        span_id=new_span_id(),
        trace_id=new_trace_id(),
        task_id="t1",
        kind="tool",
        name="lookup",
        started_at=now,
        ended_at=now,
    )
