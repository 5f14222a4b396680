"""What provider resilience looks like from a task: the trace, the events, the fallbacks.

The kernel's gateway wraps whatever gateway the container holds, fakes included.
"""

import pytest

from core_agent import tool
from core_agent.contracts.errors import ModelError, ModelRateLimitError
from core_agent.tooling.registry import ToolRegistry
from fakes.gateways import FakeFaultyGateway, FakeSequentialGateway, FakeSmallWindowGateway
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeTraceStore
from shared.agent_protocol import (
    ApprovalDecision,
    AssistantMessage,
    TaskRequest,
    TaskStatus,
    ToolCall,
    ToolMessage,
)

pytestmark = pytest.mark.anyio


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@pytest.fixture
def run(container):
    def build(model, *, fallbacks=(), tools=(lookup,), **settings):
        container.settings.override(
            container.settings().model_copy(
                update={"model_retry_base_s": 0.001, "model_max_retries": 2, **settings}
            )
        )
        tasks, traces = FakeTaskStore(), FakeTraceStore()
        container.task_store.override(tasks)
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_registry.override(ToolRegistry(list(tools)))
        container.llm_gateway.override(model)
        container.fallback_gateways.override(list(fallbacks))
        return container.kernel(), tasks, traces

    return build


async def test_every_try_is_a_span_under_the_llm_span(run) -> None:
    model = FakeFaultyGateway(
        [
            ModelRateLimitError("slow down", status_code=429, retryable=True, retry_after_s=0.01),
            ModelError("overloaded", status_code=503, retryable=True),
            AssistantMessage(content="the answer"),
        ],
        name="primary",
    )
    kernel, _, traces = run(model)
    streamed = [e async for e in kernel.stream_task(TaskRequest(task="q", force_mode="react"))]
    result = await kernel.get_task(streamed[0].task_id)
    assert result.status is TaskStatus.SUCCEEDED and result.output == "the answer"

    (llm,) = [s for s in traces.spans if s.kind == "llm"]
    tries = sorted(
        (s for s in traces.spans if s.kind == "llm_attempt"), key=lambda s: s.attributes["attempt"]
    )
    assert llm.attributes["attempts"] == 3 and llm.status == "ok"
    assert [s.parent_span_id for s in tries] == [llm.span_id] * 3
    assert [s.status for s in tries] == ["error", "error", "ok"]
    assert [s.attributes["outcome"] for s in tries] == ["retry", "retry", "ok"]
    assert tries[0].attributes["status_code"] == 429 and "slow down" in tries[0].error
    assert tries[0].attributes["retry_after_s"] == 0.01 and tries[0].attributes["wait_s"] == 0.01
    assert tries[1].attributes["status_code"] == 503 and tries[1].attributes["wait_s"] >= 0
    # Deltas say which try they belong to, so a host can drop a failed try's text.
    deltas = [(e.attempt, e.text) for e in streamed if e.kind == "llm.delta"]
    assert deltas == [(1, "partial"), (2, "partial"), (3, "the answer")]


async def test_a_call_answered_at_once_has_no_child_spans(run) -> None:
    kernel, _, traces = run(FakeFaultyGateway([AssistantMessage(content="hi")]))
    await kernel.execute_task(TaskRequest(task="q", force_mode="react"))
    (llm,) = [s for s in traces.spans if s.kind == "llm"]
    assert llm.attributes["attempts"] == 1
    assert not [s for s in traces.spans if s.kind == "llm_attempt"]


async def test_a_fallback_model_answers_when_the_primary_fails(run) -> None:
    primary = FakeFaultyGateway(
        [ModelError("down", status_code=500, retryable=True) for _ in range(3)], name="primary"
    )
    backup = FakeFaultyGateway([AssistantMessage(content="from the backup")], name="backup")
    kernel, tasks, traces = run(primary, fallbacks=[backup], model_max_retries=1)
    result = await kernel.execute_task(TaskRequest(task="q", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED and result.output == "from the backup"
    (llm,) = [s for s in traces.spans if s.kind == "llm"]
    assert llm.name == "primary" and llm.attributes["fallback_model"] == "backup"
    completed = next(e for e in tasks.events[result.task_id] if e.kind == "llm.completed")
    assert completed.model == "backup"


async def test_a_dead_provider_fails_the_task_with_its_error_after_the_budget(run) -> None:
    model = FakeFaultyGateway(
        [ModelError("down", status_code=500, retryable=True) for _ in range(10)]
    )
    kernel, _, traces = run(model, model_max_retries=2)
    result = await kernel.execute_task(TaskRequest(task="q", force_mode="react"))
    assert result.status is TaskStatus.FAILED and result.error_type == "ModelError"
    assert model.calls == 3
    assert len([s for s in traces.spans if s.kind == "llm_attempt"]) == 3


@tool
def read_page(page: int) -> str:
    """Read one page."""
    return f"page {page} text"


async def test_a_prompt_refused_as_too_long_is_sent_again_with_the_newer_half(run) -> None:
    # Six turns that each read a page, then the answer; the provider takes at most 9 messages.
    turns = [
        AssistantMessage(
            content="", tool_calls=[ToolCall(id=f"c{n}", name="read_page", arguments={"page": n})]
        )
        for n in range(6)
    ]
    model = FakeSmallWindowGateway(
        FakeSequentialGateway([*turns, AssistantMessage(content="done")]), max_messages=9
    )
    kernel, _, _ = run(model, tools=[read_page])
    result = await kernel.execute_task(TaskRequest(task="read the pages", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED and result.output == "done"
    sizes = [len(r.messages) for r in model.requests]
    refused = [i for i, size in enumerate(sizes) if size > 9]
    # Each refusal is followed by one shorter try, and the next calls stay within the cap.
    assert refused and all(sizes[i + 1] <= 9 for i in refused)
    last = model.requests[-1].messages
    assert any("left out" in (m.content or "") for m in last)
    assert isinstance(last[-1], ToolMessage) and "page 5" in last[-1].content


@tool
def read_all(name: str) -> str:
    """Read a whole document."""
    return f"{name}: " + "lorem ipsum " * 600


async def test_a_prompt_of_one_turn_refused_as_too_long_is_sent_with_its_result_cut(run) -> None:
    # One read of a long document fills a small model's window: there is no older turn to
    # leave out, so the task failed at its first model call after the read.
    call = ToolCall(id="c1", name="read_all", arguments={"name": "spec"})
    model = FakeSmallWindowGateway(
        FakeSequentialGateway(
            [AssistantMessage(content="", tool_calls=[call]), AssistantMessage(content="done")]
        ),
        max_messages=50,
        max_chars=4000,
    )
    kernel, _, _ = run(model, tools=[read_all])
    result = await kernel.execute_task(TaskRequest(task="summarise spec", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED and result.output == "done", result.error
    refused, shortened = model.requests[1], model.requests[2]
    (whole,) = [m for m in refused.messages if isinstance(m, ToolMessage)]
    (cut,) = [m for m in shortened.messages if isinstance(m, ToolMessage)]
    assert len(cut.content) < len(whole.content) // 2 and cut.content.startswith("spec: lorem")


async def test_a_prompt_that_cannot_be_shortened_fails_with_the_providers_error(run) -> None:
    model = FakeSmallWindowGateway(
        FakeSequentialGateway([AssistantMessage(content="never")]), max_messages=1
    )
    kernel, _, _ = run(model)
    result = await kernel.execute_task(TaskRequest(task="q", force_mode="react"))
    assert result.status is TaskStatus.FAILED
    assert result.error_type == "ModelContextWindowError"
    assert len(model.requests) == 1  # nothing to trim: not sent again


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (high risk: the task waits for a human)."""
    return f"launched {target}"


async def test_a_resumed_loop_keeps_sending_the_shortened_prompt(run) -> None:
    """The shortening is part of the loop's checkpoint: resuming does not pay the refusal again."""
    turns = [
        AssistantMessage(
            content="", tool_calls=[ToolCall(id=f"c{n}", name="read_page", arguments={"page": n})]
        )
        for n in range(6)
    ]
    risky = AssistantMessage(
        content="", tool_calls=[ToolCall(id="go", name="launch", arguments={"target": "x"})]
    )
    model = FakeSmallWindowGateway(
        FakeSequentialGateway([*turns, risky, AssistantMessage(content="done")]), max_messages=9
    )
    kernel, _, _ = run(model, tools=[read_page, launch])
    waiting = await kernel.execute_task(TaskRequest(task="read, then launch", force_mode="react"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    assert any(len(r.messages) > 9 for r in model.requests)  # refused once, then shortened
    before = len(model.requests)
    request_id = waiting.pending_approval
    assert request_id is not None
    done = await kernel.resolve_approval(
        request_id, ApprovalDecision(request_id=request_id, approved=True, decided_by="me")
    )
    assert done.status is TaskStatus.SUCCEEDED and done.output == "done"
    assert [len(r.messages) for r in model.requests[before:]] == [
        len(model.requests[before].messages)
    ]
    assert len(model.requests[before].messages) <= 9
