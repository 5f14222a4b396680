"""Spans exported to a real OTLP/HTTP receiver and read back with their GenAI attributes.

The receiver (``support.otlp_receiver``) runs on loopback and decodes the protobuf requests
OpenTelemetry's SDK exporter sends; the exporter is chosen by name from the settings, through
its entry point, as a user's configuration chooses it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import Span
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus
from support.otlp_receiver import OtlpReceiver, ReceivedSpan
from support.span_exporter_entry_points import install_span_exporters

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture
def collector(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    receiver.clear()
    install_span_exporters(monkeypatch, tmp_path / "site")
    return receiver


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise ValueError("the index is broken")
    return {"capital_fr": "Paris"}.get(key, "unknown")


def calls(*keys: str) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedToolCall(name="lookup", arguments={"key": key}) for key in keys]
    )


def kernel_for(settings: AgentSettings, *turns: ScriptedTurn):
    container = KernelContainer()
    container.settings.override(settings)
    container.tool_registry.override(ToolRegistry([lookup]))
    container.llm_gateway.override(ScriptedLLMGateway(list(turns), model_name="openai/gpt-4o-mini"))
    return container.kernel()


async def run_task(settings: AgentSettings, *turns: ScriptedTurn) -> tuple[str, str, list[Span]]:
    kernel = kernel_for(settings, *turns)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        task = await kernel.get_task(result.task_id)
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    return result.task_id, task.trace_id, spans


def by_id(received: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.span_id: span for span in received}


async def test_a_task_arrives_as_one_trace_with_genai_attributes(
    collector: OtlpReceiver, tmp_path: Path
) -> None:
    settings = AgentSettings(data_dir=tmp_path / "data", otel_endpoint=collector.endpoint)
    task_id, trace_id, stored = await run_task(
        settings, calls("capital_fr", "broken"), ScriptedTurn(content="It is Paris.")
    )
    received = by_id(collector.wait_for_spans(len(stored)))

    # The same spans, ids, parents and times as `core-agent trace` shows.
    assert set(received) == {span.span_id for span in stored}
    for span in stored:
        got = received[span.span_id]
        assert got.trace_id == trace_id
        assert got.parent_span_id == span.parent_span_id
        assert got.attributes["core_agent.task.id"] == task_id
        assert got.attributes["core_agent.span.kind"] == span.kind
        # Every span of a session's turn names the session as the conversation.
        assert got.attributes["gen_ai.conversation.id"] == span.attributes["session_id"]
        assert got.end_ns - got.start_ns == pytest.approx(span.latency_ms * 1e6, abs=1000)
    assert {s.resource.get("service.name") for s in received.values()} == {"core-agent"}
    assert {s.scope for s in received.values()} == {"core_agent"}

    task = next(s for s in stored if s.kind == "task")
    agent = received[task.span_id]
    assert agent.name == "invoke_agent core-agent"
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.usage.input_tokens"] == task.tokens_in

    model_calls = [s for s in stored if s.kind == "llm"]
    assert len(model_calls) == 2
    for span in model_calls:
        chat = received[span.span_id]
        assert chat.name == "chat gpt-4o-mini"
        assert chat.kind == "SPAN_KIND_CLIENT"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.system"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert chat.attributes["gen_ai.response.model"] == "gpt-4o-mini"
        assert chat.attributes["gen_ai.usage.input_tokens"] == span.tokens_in > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] == span.tokens_out > 0
    finish = [received[s.span_id].attributes["gen_ai.response.finish_reasons"] for s in model_calls]
    assert finish == [["tool_calls"], ["stop"]]

    tools = {
        received[s.span_id].attributes["gen_ai.tool.call.arguments"]: received[s.span_id]
        for s in stored
        if s.kind == "tool"
    }
    found, broken = tools['{"key": "capital_fr"}'], tools['{"key": "broken"}']
    for span in (found, broken):
        assert span.name == "execute_tool lookup"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "lookup"
        assert span.attributes["gen_ai.tool.call.id"]
    assert found.status == "STATUS_CODE_UNSET"
    assert broken.status == "STATUS_CODE_ERROR"
    assert "the index is broken" in broken.status_message
    assert broken.attributes["error.type"]
    assert found.attributes["gen_ai.tool.call.id"] != broken.attributes["gen_ai.tool.call.id"]


async def test_a_refusing_collector_fails_no_task_and_is_told_once(
    collector: OtlpReceiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    collector.status = 400
    settings = AgentSettings(data_dir=tmp_path / "data", otel_endpoint=collector.endpoint)
    _, _, stored = await run_task(settings, ScriptedTurn(content="Paris."))
    assert stored and collector.requests >= 1 and not collector.spans
    told = [r for r in caplog.records if "were not sent" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.WARNING
    assert collector.endpoint in told[0].getMessage() and "400" in told[0].getMessage()
    # The SDK's own error line became that warning: it is not logged a second time.
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


async def test_a_collector_that_does_not_answer_does_not_hold_the_task(
    collector: OtlpReceiver, tmp_path: Path
) -> None:
    collector.hold()
    settings = AgentSettings(data_dir=tmp_path / "data", otel_endpoint=collector.endpoint)
    kernel = kernel_for(settings, ScriptedTurn(content="Paris."))
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
        collector.wait_for_requests(1)  # the export is under way and unanswered...
        assert result.status is TaskStatus.SUCCEEDED  # ...and the task is done
        stored = await kernel.task_spans(result.task_id)
        collector.release()
    assert {s.span_id for s in collector.wait_for_spans(len(stored))} == {s.span_id for s in stored}


async def test_otel_variables_send_nothing_unless_allowed(
    collector: OtlpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    await run_task(AgentSettings(data_dir=tmp_path / "one"), ScriptedTurn(content="Paris."))
    assert collector.requests == 0

    allowed = AgentSettings(data_dir=tmp_path / "two", otel_use_env=True)
    _, _, stored = await run_task(allowed, ScriptedTurn(content="Paris."))
    assert len(collector.wait_for_spans(len(stored))) == len(stored)


async def test_without_the_otel_extra_tasks_run_and_a_warning_says_what_to_install(
    collector: OtlpReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What a machine without the extra looks like to the import system.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)
    settings = AgentSettings(data_dir=tmp_path / "data", otel_endpoint=collector.endpoint)
    await run_task(settings, ScriptedTurn(content="Paris."))
    assert collector.requests == 0
    warning = next(r for r in caplog.records if "spans are not exported" in r.getMessage())
    assert warning.levelno == logging.WARNING
    assert "pip install 'core-agent[otel]'" in warning.getMessage()
