"""What the trace store keeps: the task's root span however it ends, texts cut after redaction."""

import pytest

from core_agent import tool
from core_agent.contracts.settings import AgentSettings
from core_agent.observability.tracer import Tracer
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio
SECRET = "sk-proj-" + "Qw9" * 10


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (high risk: exec)."""
    return f"launched {target}"


@pytest.fixture
def kernel_for(container, tmp_path):
    def build(*turns, **fields):
        container.settings.override(AgentSettings(data_dir=tmp_path / "data", **fields))
        tasks, traces = FakeTaskStore(), FakeTraceStore()
        container.task_store.override(tasks)
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([launch]))
        container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
        return container.kernel(), traces

    return build


def root_of(traces: FakeTraceStore, task_id: str):
    (root,) = [s for s in traces.spans if s.task_id == task_id and s.parent_span_id is None]
    assert root.kind == "task"
    return root


async def test_a_failed_task_ends_its_tree_with_an_error_root(kernel_for) -> None:
    kernel, traces = kernel_for(
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="missing", arguments={})])
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react", max_turns=1))
    assert result.status is TaskStatus.FAILED
    root = root_of(traces, result.task_id)
    assert root.status == "error" and root.attributes["task_status"] == "failed"
    assert "no final answer" in (root.error or "")
    assert all(s.parent_span_id for s in traces.spans if s is not root)


async def test_a_waiting_task_canceled_by_the_host_gets_its_root_with_the_reason(
    kernel_for,
) -> None:
    kernel, traces = kernel_for(
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="launch", arguments={"target": "x"})])
    )
    waiting = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    assert not [s for s in traces.spans if s.kind == "task"]  # the task has not ended
    await kernel.cancel_task(waiting.task_id, "not today")
    root = root_of(traces, waiting.task_id)
    assert root.status == "ok" and root.attributes["task_status"] == "canceled"
    assert root.attributes["reason"] == "not today"
    assert root.started_at <= min(s.started_at for s in traces.spans)


async def test_a_text_is_cut_to_the_cap_only_after_its_secrets_are_redacted(
    container, tmp_path
) -> None:
    container.settings.override(
        AgentSettings(data_dir=tmp_path / "data", trace_content_max_chars=100)
    )
    traces = FakeTraceStore()
    container.trace_store.override(traces)
    store = container.redacted_trace_store()
    tracer = Tracer(store, trace_id="t" * 32, task_id="task", session_id="s")
    # The secret straddles the cap: cut first, its head would no longer look like a key.
    text = "x" * 90 + SECRET + " and more after it" * 20
    async with tracer.span("tool", "write") as span:
        span.attributes["arguments"] = tracer.text(text)
    (kept,) = traces.spans
    recorded = kept.attributes["arguments"]
    assert recorded.startswith("x" * 90 + "[REDACTED]"[:10])
    assert SECRET[:8] not in recorded and "more characters not recorded" in recorded
    assert kept.attributes["session_id"] == "s"
    assert kept.parent_span_id == tracer.root_span_id


async def test_with_tracing_off_nothing_is_kept_and_content_is_not_built(
    container, tmp_path
) -> None:
    container.settings.override(AgentSettings(data_dir=tmp_path / "data", tracing=False))
    traces = FakeTraceStore()
    container.trace_store.override(traces)
    tracer = Tracer(container.redacted_trace_store(), trace_id="t" * 32, task_id="task")
    assert tracer.content is False
    async with tracer.span("llm", "model"):
        pass
    assert traces.spans == []


async def test_redacting_a_span_keeps_every_field_it_does_not_redact(container, tmp_path) -> None:
    import dataclasses
    from datetime import UTC, datetime

    from core_agent.contracts.trace_store import Span

    container.settings.override(AgentSettings(data_dir=tmp_path / "data"))
    traces = FakeTraceStore()
    container.trace_store.override(traces)
    span = Span(
        span_id="1" * 16,
        trace_id="2" * 32,
        task_id="task",
        kind="llm",
        name="model",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        ended_at=datetime(2026, 1, 2, tzinfo=UTC),
        status="error",
        parent_span_id="3" * 16,
        tokens_in=1,
        tokens_out=2,
        cost_usd=0.5,
        error="boom",
        attributes={"a": 1},
    )
    await container.redacted_trace_store().record(span)
    (kept,) = traces.spans
    assert {f.name: getattr(kept, f.name) for f in dataclasses.fields(Span)} == {
        f.name: getattr(span, f.name) for f in dataclasses.fields(Span)
    }


@pytest.mark.parametrize("patterns", [(), (r"ACME-\d{6}",)], ids=["built-in", "user pattern"])
async def test_secrets_are_redacted_wherever_they_sit_in_a_spans_attributes(
    container, tmp_path, monkeypatch, patterns
) -> None:
    # Host secrets with a quote or a backslash and a bearer token after a tab are escaped in
    # JSON, where a search of a span's whole payload would not find them as they are.
    quoted, slashed = 'pa"ss-w0rd-4471', "back\\slash-5521"
    monkeypatch.setenv("SERVICE_PASSWORD", quoted)
    monkeypatch.setenv("SERVICE_TOKEN", slashed)
    container.settings.override(
        AgentSettings(
            data_dir=tmp_path / "data", trace_content_max_chars=100, redact_patterns=patterns
        )
    )
    traces = FakeTraceStore()
    container.trace_store.override(traces)
    tracer = Tracer(container.redacted_trace_store(), trace_id="t" * 32, task_id="task")
    cases = [
        ({"arguments": f'{{"password": "{quoted}"}}'}, {"arguments": '{"password": "[REDACTED]"}'}),
        ({"result": f"token {slashed}"}, {"result": "token [REDACTED]"}),
        (
            {"input_messages": [{"role": "tool", "content": "auth Bearer\t" + "Tk9" * 10}]},
            {"input_messages": [{"role": "tool", "content": "auth [REDACTED]"}]},
        ),
        (
            {"result": [{"text": f"key {SECRET}"}, 3, None, True]},
            {"result": [{"text": "key [REDACTED]"}, 3, None, True]},
        ),
        ({"long": "y" * 150}, {"long": "y" * 100 + "… [50 more characters not recorded]"}),
        ({"plain": "nothing to hide"}, {"plain": "nothing to hide"}),
    ]
    for attributes, _ in cases:
        async with tracer.span("tool", "fetch") as span:
            span.attributes.update(attributes)
    assert [span.attributes for span in traces.spans] == [kept for _, kept in cases]


async def test_a_span_with_nothing_to_redact_is_kept_as_the_tracer_wrote_it(
    container, tmp_path
) -> None:
    container.settings.override(AgentSettings(data_dir=tmp_path / "data"))
    traces = FakeTraceStore()
    container.trace_store.override(traces)
    tracer = Tracer(container.redacted_trace_store(), trace_id="t" * 32, task_id="task")
    async with tracer.span("tool", "fetch") as span:
        span.attributes.update({"unproven": ("a", "b"), "n": 1, "text": "中文 é"})
        span.error = "it failed"
    (kept,) = traces.spans
    assert kept.attributes == {"unproven": ("a", "b"), "n": 1, "text": "中文 é"}
    assert kept.error == "it failed" and kept.status == "error" and kept.name == "fetch"
