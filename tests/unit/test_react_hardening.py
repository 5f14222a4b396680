"""ReAct hardening, driven by the scripted model through the container."""

import pytest
from pydantic import BaseModel

from core_agent import tool
from core_agent.contracts.errors import TaskFailedError
from core_agent.contracts.text_cuts import truncate_observation
from core_agent.tooling.registry import ToolRegistry
from fakes.gateways import FakeRecordingGateway, FakeSequentialGateway
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    AssistantMessage,
    TaskRequest,
    TaskStatus,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from support.rendezvous import Rendezvous

pytestmark = pytest.mark.anyio

calls: dict[str, int] = {}


@tool(capabilities={"read"}, idempotent=True)
def fetch(key: str) -> str:
    """Fetch a record by key."""
    calls[key] = calls.get(key, 0) + 1
    return f"record {key}"


@tool
def page(n: int) -> str:
    """Read one page of the manual."""
    return f"page {n}: " + " ".join(f"sentence {i} of page {n} says something." for i in range(12))


@tool
def dump() -> str:
    """Return a huge document."""
    return "HEAD-" + "x" * 50_000 + "-TAIL"


@tool
def broken(n: int) -> str:
    """Always fails."""
    raise RuntimeError(f"backend down ({n})")


@tool(idempotent=True)
def pair(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


barrier = Rendezvous(3)


@tool
async def meet(who: str) -> str:
    """Wait until three callers have arrived."""
    await barrier.wait()
    return f"{who} met the others"


def turn(*tool_calls: tuple[str, dict], content: str | None = None) -> ScriptedTurn:
    return ScriptedTurn(
        content=content,
        tool_calls=[ScriptedToolCall(name=name, arguments=args) for name, args in tool_calls],
    )


@pytest.fixture
def run(container):
    def build(*turns: ScriptedTurn, model=None, **settings):
        if settings:
            container.settings.override(container.settings().model_copy(update=settings))
        gateway = FakeRecordingGateway(model or ScriptedLLMGateway(list(turns)))
        tasks, traces = FakeTaskStore(), FakeTraceStore()
        container.task_store.override(tasks)
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([fetch, page, dump, broken, meet, pair]))
        container.llm_gateway.override(gateway)
        return container.kernel(), gateway, tasks, traces

    return build


def tool_messages(request) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


async def test_a_repeated_call_is_not_executed_and_the_model_is_told(run) -> None:
    calls.clear()
    kernel, gateway, _, traces = run(
        turn(("fetch", {"key": "a"})),
        turn(("fetch", {"key": "a"})),
        turn(content="done"),
    )
    result = await kernel.execute_task(TaskRequest(task="get a", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert calls == {"a": 1}
    refusal = tool_messages(gateway.requests[2])[-1]
    assert (
        refusal.is_error and "already called fetch with exactly these arguments" in refusal.content
    )
    assert "record a" in refusal.content  # the earlier result is handed back
    skipped = [s for s in traces.spans if s.kind == "tool" and s.attributes.get("skipped")]
    assert len(skipped) == 1 and skipped[0].attributes["error_type"] == "LoopDetected"


async def test_argument_order_does_not_hide_a_loop(run) -> None:
    kernel, gateway, _, _ = run(
        turn(("pair", {"a": 1, "b": 2})), turn(("pair", {"b": 2, "a": 1})), turn(content="3")
    )
    await kernel.execute_task(TaskRequest(task="add", force_mode="react"))
    assert tool_messages(gateway.requests[2])[-1].content.startswith("Error: you already called")


async def test_long_observations_keep_head_and_tail(run) -> None:
    kernel, gateway, _, traces = run(
        turn(("dump", {})), turn(content="ok"), max_observation_chars=1000
    )
    await kernel.execute_task(TaskRequest(task="dump it", force_mode="react"))
    observed = tool_messages(gateway.requests[1])[-1].content
    assert len(observed) <= 1000
    assert observed.startswith("HEAD-") and observed.endswith("-TAIL")
    assert "characters truncated" in observed
    span = next(s for s in traces.spans if s.kind == "tool")
    assert span.attributes["truncated_from_chars"] == 50_010


def test_truncation_never_exceeds_the_limit() -> None:
    for size in (0, 10, 299, 300, 301, 1000, 10_000):
        text = "h" + "y" * size + "t"
        cut = truncate_observation(text, 300)
        assert len(cut) <= 300
        assert cut == text or (cut.startswith("hy") and cut.endswith("yt"))
    assert truncate_observation("short", 300) == "short"


async def test_three_failures_in_a_row_bring_a_warning(run) -> None:
    kernel, gateway, _, _ = run(
        turn(("broken", {"n": 1})),
        turn(("broken", {"n": 2})),
        turn(("broken", {"n": 3})),
        turn(content="giving up"),
    )
    result = await kernel.execute_task(TaskRequest(task="try", force_mode="react"))
    assert result.output == "giving up"
    notices = [
        m
        for m in gateway.requests[3].messages
        if isinstance(m, UserMessage) and "tool calls failed" in m.content
    ]
    assert len(notices) == 1 and "last 3 tool calls failed" in notices[0].content
    assert not any(
        "tool calls failed" in (getattr(m, "content", None) or "")
        for m in gateway.requests[2].messages
    )


async def test_parallel_calls_of_one_turn_run_concurrently_and_keep_their_order(run) -> None:
    global barrier
    barrier = Rendezvous(3)
    kernel, gateway, _, _ = run(
        turn(("meet", {"who": "ann"}), ("meet", {"who": "bob"}), ("meet", {"who": "cy"})),
        turn(content="all met"),
    )
    result = await kernel.execute_task(TaskRequest(task="meet", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    contents = [m.content for m in tool_messages(gateway.requests[1])]
    assert contents == ["ann met the others", "bob met the others", "cy met the others"]


class Invoice(BaseModel):
    vendor: str
    total: float
    paid: bool


async def test_structured_output_through_the_final_answer_tool(run) -> None:
    kernel, gateway, _, _ = run(
        turn(("final_answer", {"vendor": "ACME", "total": 12.5, "paid": True}))
    )
    invoice = await kernel.execute_task(
        TaskRequest(task="extract", force_mode="react"), response_model=Invoice
    )
    assert invoice == Invoice(vendor="ACME", total=12.5, paid=True)
    names = [d.name for d in gateway.requests[0].tools]
    assert "final_answer" in names


async def test_broken_json_in_text_is_repaired(run) -> None:
    kernel, _, _, _ = run(
        turn(content="Here you go:\n```json\n{'vendor': 'ACME', 'total': 12.5, 'paid': true,}\n```")
    )
    invoice = await kernel.execute_task(TaskRequest(task="extract"), response_model=Invoice)
    assert invoice.vendor == "ACME" and invoice.paid is True


async def test_one_self_correction_round_fixes_an_invalid_answer(run) -> None:
    kernel, gateway, _, _ = run(
        turn(content='{"vendor": "ACME", "total": "twelve"}'),
        turn(content='{"vendor": "ACME", "total": 12, "paid": false}'),
    )
    invoice = await kernel.execute_task(TaskRequest(task="extract"), response_model=Invoice)
    assert invoice.total == 12
    correction = gateway.requests[1].messages[-1]
    assert isinstance(correction, UserMessage)
    assert "total: Input should be a valid number" in correction.content
    assert "paid: Field required" in correction.content


async def test_a_still_invalid_answer_fails_with_raw_text_and_error(run) -> None:
    kernel, _, tasks, _ = run(
        turn(content="I think it was ACME"), turn(content="Really, ACME, about twelve")
    )
    with pytest.raises(TaskFailedError) as caught:
        await kernel.execute_task(TaskRequest(task="extract"), response_model=Invoice)
    result = caught.value.result
    assert result.status is TaskStatus.FAILED
    assert result.error_type == "StructuredOutputError"
    assert "Really, ACME, about twelve" in result.error  # the raw text
    assert "no JSON object" in result.error or "Field required" in result.error
    assert tasks.tasks[result.task_id].status is TaskStatus.FAILED


async def test_a_long_conversation_is_fitted_to_the_context_budget(run) -> None:
    replies = [
        AssistantMessage(tool_calls=(ToolCall(id=f"c{n}", name="page", arguments={"n": n}),))
        for n in range(14)
    ]
    model = FakeSequentialGateway([*replies, AssistantMessage(content="ok")])
    kernel, gateway, _, traces = run(model=model, context_max_tokens=1200, max_turns=20)
    task = "Read pages 0 to 13 of the manual and summarise them."
    result = await kernel.execute_task(TaskRequest(task=task, force_mode="react"))

    assert result.status is TaskStatus.SUCCEEDED, result.error
    first, last = gateway.requests[0], gateway.requests[-1]
    assert "left out" not in str(first.messages)
    task_message = next(m for m in last.messages if isinstance(m, UserMessage))
    assert task in task_message.content  # the task itself is always sent
    assert any(isinstance(m, UserMessage) and "left out" in m.content for m in last.messages)
    assert tool_messages(last)[-1].content.startswith("page 13:")  # the newest result is there
    assert not any(m.content.startswith("page 0:") for m in tool_messages(last))
    trimmed = [s for s in traces.spans if s.kind == "llm" and "omitted_messages" in s.attributes]
    assert trimmed and trimmed[-1].attributes["omitted_messages"] > 0


async def test_the_budget_comes_from_the_model_window_when_not_set(run, container) -> None:
    _, gateway, _, _ = run(turn(("fetch", {"key": "a"})), turn(content="ok"))
    gateway.window = 100_000
    assert container.react_loop()._prompt_window().max_tokens == 100_000 - 4096
    gateway.window = 8192
    assert container.react_loop()._prompt_window().max_tokens == 8192 - 2048
    gateway.window = None
    assert container.react_loop()._prompt_window() is None
