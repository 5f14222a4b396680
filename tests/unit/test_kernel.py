"""The facade's behaviour, with in-memory fakes swapped in through the container."""

import asyncio
import logging
from contextlib import aclosing

import anyio
import pytest

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.errors import ConfigurationError, InvalidTransitionError
from core_agent.contracts.trace_store import Span
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.kernel.event_bus import InProcessEventBus
from core_agent.tooling.registry import ToolRegistry
from fakes.gateways import FakeFaultyGateway, FakeRecordingGateway
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import (
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import (
    ApprovalDecision,
    AssistantMessage,
    TaskRequest,
    TaskStatus,
    ToolStarted,
)

pytestmark = pytest.mark.anyio


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return {"capital_fr": "Paris"}.get(key, "unknown")


@tool
async def wait_forever() -> str:
    """Block until canceled."""
    await anyio.sleep(3600)
    return "never"


def build(container: KernelContainer, *turns: ScriptedTurn):
    tasks, traces = FakeTaskStore(), FakeTraceStore()
    container.task_store.override(tasks)
    container.trace_store.override(traces)
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    container.tool_registry.override(ToolRegistry([lookup, wait_forever]))
    container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
    return container.kernel(), tasks, traces


def call(name: str, **arguments) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


async def test_a_tool_using_task_succeeds_with_events_in_order(container) -> None:
    kernel, tasks, _ = build(
        container, call("lookup", key="capital_fr"), ScriptedTurn(content="It is Paris.")
    )
    result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
    assert result.status is TaskStatus.SUCCEEDED
    assert result.output == "It is Paris."
    assert result.turns == 2
    events = tasks.events[result.task_id]
    assert [e.kind for e in events] == [
        "task.queued",
        "task.started",
        "task.strategy_selected",
        "llm.completed",
        "tool.started",
        "policy.decided",
        "tool.completed",
        "llm.completed",
        "task.succeeded",
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert events[6].result.content == "Paris"
    assert events[-1].usage == result.usage


async def test_stream_yields_deltas_live_and_ends_with_the_final_event(container) -> None:
    kernel, _, _ = build(container, ScriptedTurn(content="Hello there, world."))
    kinds, text = [], ""
    async for event in kernel.stream_task(TaskRequest(task="greet")):
        kinds.append(event.kind)
        if event.kind == "llm.delta":
            text += event.text
    assert text == "Hello there, world."
    assert kinds[0] == "task.queued" and kinds[-1] == "task.succeeded"
    assert kinds.index("llm.delta") < kinds.index("llm.completed")


async def test_a_model_error_fails_the_task_with_the_reason(container) -> None:
    kernel, tasks, traces = build(
        container, ScriptedTurn(error=ScriptedError(message="upstream exploded", status_code=502))
    )
    result = await kernel.execute_task(TaskRequest(task="anything"))
    assert result.status is TaskStatus.FAILED
    assert result.error_type == "ModelError"
    assert "upstream exploded" in result.error
    stored = tasks.tasks[result.task_id]
    assert stored.status is TaskStatus.FAILED and "upstream exploded" in stored.error
    llm_span = next(s for s in traces.spans if s.kind == "llm")
    assert llm_span.status == "error" and "upstream exploded" in llm_span.error


async def test_unknown_tools_and_bad_arguments_go_back_to_the_model(container) -> None:
    kernel, tasks, _ = build(
        container,
        call("teleport", to="mars"),
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="lookup", raw_arguments="{key: oops")]),
        call("lookup", key=7),
        ScriptedTurn(content="I give up."),
    )
    result = await kernel.execute_task(TaskRequest(task="x"))
    assert result.status is TaskStatus.SUCCEEDED
    results = [e.result for e in tasks.events[result.task_id] if e.kind == "tool.completed"]
    assert [r.error_type for r in results] == [
        "ToolNotFoundError",
        "ToolArgumentsError",
        "ToolArgumentsError",
    ]
    assert "available tools: lookup, wait_forever" in results[0].content
    assert "must be a JSON object" in results[1].content
    assert "key: Input should be a valid string" in results[2].content


async def test_the_turn_limit_fails_the_task(container) -> None:
    kernel, _, _ = build(container, *[call("lookup", key="k")] * 5)
    result = await kernel.execute_task(TaskRequest(task="loop", max_turns=3))
    assert result.status is TaskStatus.FAILED
    assert result.error_type == "TurnLimitExceededError"
    assert result.turns == 3
    assert result.usage.input_tokens > 0


async def test_a_trace_store_failure_fails_the_task_without_leaving_it_running(container) -> None:
    tasks, traces = FakeTaskStore(), FakeTraceStore(fail_on_kind="tool")
    container.task_store.override(tasks)
    container.trace_store.override(traces)
    container.llm_gateway.override(
        ScriptedLLMGateway([call("lookup", key="k"), ScriptedTurn(content="done")])
    )
    result = await container.kernel().execute_task(TaskRequest(task="x"))
    assert result.status is TaskStatus.FAILED
    assert result.error_type == "StorageError"
    assert tasks.tasks[result.task_id].status is TaskStatus.FAILED


async def test_forcing_a_strategy_that_is_not_installed_is_a_misuse(container) -> None:
    _, tasks, traces = build(container, ScriptedTurn(content="hi"))
    kernel = AgentKernel(
        task_store=tasks,
        trace_store=traces,
        event_bus=InProcessEventBus(),
        router=container.router(),
        tools=container.tool_registry(),
        executors={"react": container.react_executor()},
    )
    with pytest.raises(ConfigurationError, match="'plan_execute' is not installed"):
        await kernel.execute_task(TaskRequest(task="x", force_mode="plan_execute"))
    assert tasks.tasks == {}


async def test_finished_tasks_cannot_be_canceled(container) -> None:
    kernel, _, _ = build(container, ScriptedTurn(content="hi"))
    result = await kernel.execute_task(TaskRequest(task="x"))
    with pytest.raises(
        InvalidTransitionError, match="already ended \\(succeeded\\); it cannot become canceled"
    ):
        await kernel.cancel_task(result.task_id)


async def test_cancel_interrupts_a_running_task(container) -> None:
    kernel, tasks, traces = build(container, call("wait_forever"), ScriptedTurn(content="x"))
    results = []
    tool_started = anyio.Event()
    kernel.event_bus.subscribe(ToolStarted, lambda event: tool_started.set())

    async def run() -> None:
        results.append(await kernel.execute_task(TaskRequest(task="x")))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await tool_started.wait()
        await kernel.cancel_task(next(iter(tasks.tasks)))
    assert results[0].status is TaskStatus.CANCELED
    assert tasks.events[results[0].task_id][-1].kind == "task.canceled"
    tool_span = next(s for s in traces.spans if s.kind == "tool")
    assert tool_span.status == "error"


async def test_leaving_a_stream_early_cancels_the_task(container) -> None:
    kernel, tasks, _ = build(container, call("wait_forever"), ScriptedTurn(content="x"))
    async with aclosing(kernel.stream_task(TaskRequest(task="x"))) as events:
        async for event in events:
            if event.kind == "tool.started":
                break
    (task,) = tasks.tasks.values()
    assert task.status is TaskStatus.CANCELED


async def test_breaking_out_of_a_stream_without_closing_it_cancels_the_task(container) -> None:
    # No aclosing: the loop's finaliser closes the generator in another task, which must
    # neither tear a task group nor leave the run going.
    kernel, tasks, _ = build(container, call("wait_forever"), ScriptedTurn(content="x"))
    async with kernel:
        async for event in kernel.stream_task(TaskRequest(task="x")):
            if event.kind == "tool.started":
                break
        for _ in range(500):
            (task,) = tasks.tasks.values()
            if task.status is TaskStatus.CANCELED:
                break
            await anyio.sleep(0.01)
        assert task.status is TaskStatus.CANCELED
        await anyio.sleep(0.05)  # the host's own task carries on (it was not torn)


async def test_leaving_a_stream_early_reports_no_failing_subscriber(container, caplog) -> None:
    # The task's last events (it ending canceled) come after the consumer closed its end.
    kernel, _, _ = build(container, call("wait_forever"), ScriptedTurn(content="x"))
    async with aclosing(kernel.stream_task(TaskRequest(task="x"))) as events:
        async for event in events:
            if event.kind == "tool.started":
                break
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_the_first_task_warms_the_model_up_in_a_background_thread(container) -> None:
    gateway = FakeRecordingGateway(ScriptedLLMGateway([ScriptedTurn(content="hi")]))
    container.llm_gateway.override(gateway)
    kernel = container.kernel()
    async with kernel:
        await kernel.list_tasks()
        assert gateway.warmed_in == []  # reading the stores calls no model: nothing to load
        await kernel.execute_task(TaskRequest(task="x"))
        await kernel.execute_task(TaskRequest(task="y"))
        for _ in range(200):
            if gateway.warmed_in:
                break
            await anyio.sleep(0.01)
    assert gateway.warmed_in == ["core-agent-model-warm-up"]  # once


async def test_a_task_left_queued_by_another_process_can_be_canceled(container) -> None:
    from datetime import UTC, datetime

    from shared.agent_protocol import TaskQueued, TaskState

    kernel, tasks, _ = build(container)
    now = datetime.now(UTC)
    request = TaskRequest(task="x")
    state = TaskState(
        task_id="t9",
        session_id="s",
        trace_id="tr",
        status=TaskStatus.QUEUED,
        request=request,
        created_at=now,
        updated_at=now,
    )
    await tasks.create_task(
        state,
        TaskQueued(
            event_id="e1",
            task_id="t9",
            seq=1,
            occurred_at=now,
            session_id="s",
            trace_id="tr",
            request=request,
        ),
    )
    await kernel.cancel_task("t9", reason="user changed their mind")
    assert tasks.tasks["t9"].status is TaskStatus.CANCELED
    last = tasks.events["t9"][-1]
    assert (last.kind, last.seq, last.reason) == ("task.canceled", 2, "user changed their mind")


class _Halt(BaseException):
    """A BaseException of an adapter's own, outside Exception like SystemExit."""


class _HaltingTraceStore(FakeTraceStore):
    async def record(self, span: Span) -> None:
        if span.kind == "approval":
            raise _Halt("the trace store's own BaseException")
        await super().record(span)


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (high risk: the task waits for a human)."""
    return f"launched {target}"


async def test_a_base_exception_before_a_resumed_task_is_driven_fails_it_not_cancels_it(
    container,
) -> None:
    # Between a decision and the run that carries the task on, nothing drives the task: an
    # error there ends it; only a cancel (or Ctrl-C) ends it canceled. Nobody canceled this.
    container.task_store.override(FakeTaskStore())
    container.trace_store.override(_HaltingTraceStore())
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    container.tool_registry.override(ToolRegistry([launch]))
    container.llm_gateway.override(
        ScriptedLLMGateway([call("launch", target="x"), ScriptedTurn(content="done")])
    )
    kernel = container.kernel()
    waiting = await kernel.execute_task(TaskRequest(task="launch x", force_mode="react"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL and waiting.pending_approval
    decision = ApprovalDecision(request_id=waiting.pending_approval, approved=True)
    with pytest.raises(_Halt):
        await kernel.resolve_approval(waiting.pending_approval, decision)
    stored = await kernel.get_task(waiting.task_id)
    assert stored.status is TaskStatus.FAILED
    assert stored.error == "the trace store's own BaseException"


async def test_a_cancelled_error_nobody_asked_for_fails_the_task_not_cancels_it(
    container,
) -> None:
    # An adapter that awaited something else's canceled future raises CancelledError: the
    # task fails with it; taken for a cancel, it ended canceled and the host got the cancel.
    container.task_store.override(FakeTaskStore())
    container.trace_store.override(FakeTraceStore())
    container.checkpoint_store.override(FakeCheckpointStore())
    container.llm_gateway.override(FakeFaultyGateway([asyncio.CancelledError()]))
    kernel = container.kernel()
    result = await kernel.execute_task(TaskRequest(task="hi", force_mode="react"))
    stored = await kernel.get_task(result.task_id)
    assert result.status is TaskStatus.FAILED and stored.status is TaskStatus.FAILED
    assert "CancelledError" in (stored.error or "")


async def test_an_asyncio_cancel_of_the_host_task_still_cancels_the_task(container) -> None:
    container.task_store.override(FakeTaskStore())
    container.trace_store.override(FakeTraceStore())
    container.checkpoint_store.override(FakeCheckpointStore())
    asked = anyio.Event()

    class _Hanging(FakeFaultyGateway):
        async def _outcome(self) -> AssistantMessage | BaseException:
            asked.set()
            return await super()._outcome()

    container.llm_gateway.override(_Hanging([anyio.Event()]))
    kernel = container.kernel()
    running = asyncio.create_task(
        kernel.execute_task(TaskRequest(task="hi", force_mode="react"), task_id="t-host")
    )
    await asked.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert (await kernel.get_task("t-host")).status is TaskStatus.CANCELED
