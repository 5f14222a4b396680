"""The synchronous facade: a kernel on its own loop thread, called from many host threads.

Real SQLite and real threads: the host's threads block in the facade's calls while the
kernel runs on the loop thread, and callbacks arrive on the dispatch thread (the facade's
own, or a "GUI thread" played by the test's main thread).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import core_agent
from core_agent import tool
from core_agent.container import KernelContainer, create_sync_kernel
from core_agent.contracts.errors import (
    KernelClosedError,
    SessionClosedError,
    TaskFailedError,
    TaskNotFoundError,
    UsageError,
)
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool
from core_agent.kernel.sync_kernel import SyncKernel
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    TaskEvent,
    TaskRequest,
    TaskStatus,
)

GUARD_S = 60.0
"""How long a test waits for something that should happen at once: a hang guard only."""

ran: list[str] = []
"""What the tools below did, in order (cleared by each test)."""

holding = threading.Event()
released: list[str] = []


@tool(capabilities={"read"}, idempotent=True)
def lookup(key: str) -> str:
    """Look a key up."""
    ran.append(f"lookup {key}")
    return {"capital_fr": "Paris"}.get(key, "unknown")


@tool(capabilities={"exec"})
def launch(target: str) -> str:
    """Launch something (exec: high risk, so a human is asked first)."""
    ran.append(f"launch {target}")
    return f"launched {target}"


@tool
async def hold() -> str:
    """Run until canceled."""
    holding.set()
    try:
        await anyio.sleep_forever()
    finally:
        released.append(threading.current_thread().name)
    return "never"


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()
    released.clear()
    holding.clear()


def call(name: str, **arguments: Any) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


def build(
    tmp_path: Path,
    turns: Sequence[ScriptedTurn],
    tools: Sequence[ITool] = (lookup, launch, hold),
    **options: Any,
) -> SyncKernel:
    container = KernelContainer()
    container.settings.override(
        AgentSettings(data_dir=tmp_path / "data", recovery="off", model_max_retries=0)
    )
    container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
    container.tool_registry.override(ToolRegistry(tools))
    return SyncKernel(container.kernel(), **options)


class Events:
    """Events a callback received, with the thread each came on."""

    def __init__(self) -> None:
        self.items: list[tuple[TaskEvent, str]] = []
        self._changed = threading.Condition()

    def __call__(self, event: TaskEvent) -> None:
        with self._changed:
            self.items.append((event, threading.current_thread().name))
            self._changed.notify_all()

    def kinds(self, task_id: str | None = None) -> list[str]:
        return [e.kind for e, _ in self.items if task_id is None or e.task_id == task_id]

    def wait_for(self, kind: str) -> TaskEvent:
        with self._changed:
            assert self._changed.wait_for(
                lambda: any(e.kind == kind for e, _ in self.items), GUARD_S
            ), f"no {kind} event"
            return next(e for e, _ in self.items if e.kind == kind)


class GuiThread:
    """The test's main thread plays a GUI thread: what is posted to it runs when it pumps."""

    def __init__(self) -> None:
        self.posted: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self.name = threading.current_thread().name

    def post(self, callback: Callable[[], object]) -> None:
        self.posted.put(callback)

    def pump_until(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + GUARD_S
        while not done():
            assert time.monotonic() < deadline, "the condition never came true"
            with contextlib.suppress(queue.Empty):
                self.posted.get(timeout=0.01)()


def in_thread(func: Callable[[], Any]) -> Future[Any]:
    """Run ``func`` in a new thread of its own; its result (or error) in a future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(func())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="host-worker").start()
    return future


def test_many_threads_call_at_once_and_each_gets_its_own_answer(tmp_path: Path) -> None:
    turns = [call("lookup", key="capital_fr"), ScriptedTurn(content="It is Paris.")]
    with build(tmp_path, turns) as sync:
        start = threading.Barrier(8)

        def host(index: int) -> tuple[str, str, str]:
            start.wait()
            if index % 2:
                result = sync.execute_task(TaskRequest(task=f"Capital of France? ({index})"))
                task_id, output = result.task_id, result.output or ""
            else:
                with sync.stream(TaskRequest(task=f"Capital of France? ({index})")) as events:
                    kinds = [event.kind for event in events]
                task_id, output = events.task_id, kinds[-1]
            stored = sync.get_task(task_id)
            assert task_id in {t.task_id for t in sync.list_tasks(limit=100)}
            return task_id, output, stored.status.value

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(host, range(8)))
    assert len({task_id for task_id, _, _ in answers}) == 8
    assert {output for i, (_, output, _) in enumerate(answers) if i % 2} == {"It is Paris."}
    assert {output for i, (_, output, _) in enumerate(answers) if not i % 2} == {"task.succeeded"}
    assert {status for _, _, status in answers} == {"succeeded"}
    assert ran == ["lookup capital_fr"] * 8


def test_a_cancel_from_another_thread_stops_the_tool_and_the_blocked_caller_returns(
    tmp_path: Path,
) -> None:
    with build(tmp_path, [call("hold"), ScriptedTurn(content="never")]) as sync:
        events = Events()
        sync.on_event(events)
        blocked = in_thread(lambda: sync.execute_task(TaskRequest(task="hold on")))
        assert holding.wait(GUARD_S)
        queued = events.wait_for("task.queued")
        in_thread(lambda: sync.cancel(queued.task_id, "the user pressed Stop")).result(GUARD_S)
        result = blocked.result(GUARD_S)
        assert result.status is TaskStatus.CANCELED
        assert result.error == "the user pressed Stop"
        assert released == ["core-agent-kernel"]  # the tool ran, and was stopped, on the loop
        assert sync.get_task(result.task_id).status is TaskStatus.CANCELED
        events.wait_for("task.canceled")


def test_the_approval_callback_is_asked_on_the_dispatch_thread_and_its_answer_is_kept(
    tmp_path: Path,
) -> None:
    asked: list[tuple[str, str]] = []

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(
            (request.tool_call.name if request.tool_call else "", threading.current_thread().name)
        )
        return ApprovalDecision(request_id=request.request_id, approved=True, decided_by="ada")

    turns = [call("launch", target="rocket"), ScriptedTurn(content="Launched.")]
    with build(tmp_path, turns, approval_callback=approve) as sync:
        result = sync.execute_task(TaskRequest(task="launch the rocket"))
        assert result.status is TaskStatus.SUCCEEDED, result.error
        assert ran == ["launch rocket"]
        assert asked == [("launch", "core-agent-callbacks_0")]
        resolved = [e for e in sync.task_events(result.task_id) if e.kind == "approval.resolved"]
        assert [e.decision.decided_by for e in resolved] == ["ada"]  # type: ignore[attr-defined]


def test_a_gui_thread_gets_every_callback_and_answers_the_dialog_later(tmp_path: Path) -> None:
    """A non-modal dialog: the callback returns a future the GUI completes on a later click."""
    gui = GuiThread()
    dialogs: list[tuple[ApprovalRequest, Future[ApprovalDecision]]] = []

    def open_dialog(request: ApprovalRequest) -> Future[ApprovalDecision]:
        answer: Future[ApprovalDecision] = Future()
        dialogs.append((request, answer))
        return answer

    turns = [call("launch", target="rocket"), ScriptedTurn(content="Launched.")]
    with build(tmp_path, turns, dispatch=gui.post, approval_callback=open_dialog) as sync:
        events = Events()
        handle = sync.submit(TaskRequest(task="launch the rocket"), on_event=events)
        gui.pump_until(lambda: bool(dialogs))
        request, answer = dialogs[0]
        assert request.task_id == handle.task_id and ran == []
        assert sync.get_task(handle.task_id).status is TaskStatus.WAITING_APPROVAL
        answer.set_result(ApprovalDecision(request_id=request.request_id, approved=True))
        ended: list[str] = []
        handle.add_done_callback(lambda h: ended.append(threading.current_thread().name))
        gui.pump_until(lambda: bool(ended))
        result = handle.result()
        assert result.status is TaskStatus.SUCCEEDED and ran == ["launch rocket"]
        assert ended == [gui.name]
        assert {thread for _, thread in events.items} == {gui.name}
        assert events.kinds()[0] == "task.queued" and events.kinds()[-1] == "task.succeeded"
        assert "approval.requested" in events.kinds()


def test_a_denial_from_the_dialog_keeps_the_call_from_running(tmp_path: Path) -> None:
    def deny(request: ApprovalRequest) -> Future[ApprovalDecision]:
        answer: Future[ApprovalDecision] = Future()
        answer.set_result(
            ApprovalDecision(request_id=request.request_id, approved=False, reason="not today")
        )
        return answer

    turns = [call("launch", target="rocket"), ScriptedTurn(content="I did not launch it.")]
    with build(tmp_path, turns, approval_callback=deny) as sync:
        result = sync.execute_task(TaskRequest(task="launch the rocket"))
        assert result.status is TaskStatus.SUCCEEDED and result.output == "I did not launch it."
        assert ran == []
        (completed,) = [e for e in sync.task_events(result.task_id) if e.kind == "tool.completed"]
        assert completed.result.error_type == "ApprovalDeniedError"  # type: ignore[attr-defined]


def test_a_cancel_while_the_dialog_is_open_withdraws_the_question(tmp_path: Path) -> None:
    gui = GuiThread()
    dialogs: list[Future[ApprovalDecision]] = []
    closed_on: list[str] = []

    def open_dialog(request: ApprovalRequest) -> Future[ApprovalDecision]:
        answer: Future[ApprovalDecision] = Future()
        answer.add_done_callback(
            lambda f: closed_on.append(threading.current_thread().name) if f.cancelled() else None
        )
        dialogs.append(answer)
        return answer

    turns = [call("launch", target="rocket"), ScriptedTurn(content="never")]
    with build(tmp_path, turns, dispatch=gui.post, approval_callback=open_dialog) as sync:
        handle = sync.submit(TaskRequest(task="launch the rocket"))
        gui.pump_until(lambda: bool(dialogs))
        assert handle.cancel("the user closed the window")
        gui.pump_until(lambda: bool(closed_on) and handle.done())
        assert closed_on == [gui.name]  # withdrawn on the GUI thread: the dialog may close
        assert handle.result().status is TaskStatus.CANCELED and ran == []
        assert not handle.cancel()  # it has ended


def test_a_waiting_task_is_resolved_from_another_thread(tmp_path: Path) -> None:
    turns = [call("launch", target="probe"), ScriptedTurn(content="Probe launched.")]
    with build(tmp_path, turns) as sync:
        announced: list[tuple[ApprovalRequest, str]] = []
        seen = threading.Event()

        def announce(request: ApprovalRequest) -> None:
            announced.append((request, threading.current_thread().name))
            seen.set()

        sync.on_approval_request(announce)
        waiting = sync.execute_task(TaskRequest(task="launch the probe"))
        assert waiting.status is TaskStatus.WAITING_APPROVAL and ran == []
        assert seen.wait(GUARD_S)
        ((request, thread),) = announced
        assert (
            request.request_id == waiting.pending_approval == sync.pending_approvals()[0].request_id
        )
        assert thread == "core-agent-callbacks_0"
        decision = ApprovalDecision(request_id=request.request_id, approved=True)
        result = in_thread(lambda: sync.resolve_approval(request.request_id, decision)).result(
            GUARD_S
        )
        assert result.status is TaskStatus.SUCCEEDED and result.output == "Probe launched."
        assert ran == ["launch probe"] and sync.pending_approvals() == []
        with pytest.raises(UsageError, match="already approved"):
            sync.resolve_approval(request.request_id, decision)


def test_a_stream_closed_early_cancels_its_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with build(tmp_path, [call("hold"), ScriptedTurn(content="never")]) as sync:
        with sync.stream(TaskRequest(task="hold on")) as events:
            for event in events:
                if event.kind == "tool.started":
                    assert holding.wait(GUARD_S)
                    break
        # Left: the task has ended, not merely been asked to.
        stored = sync.get_task(events.task_id)
        assert stored.status is TaskStatus.CANCELED
        assert released == ["core-agent-kernel"]
        assert list(events) == []  # nothing more comes
        events.close()  # closing again is harmless
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_cancel_ends_a_stream_another_thread_reads_with_the_canceled_event(
    tmp_path: Path,
) -> None:
    with build(tmp_path, [call("hold"), ScriptedTurn(content="never")]) as sync:
        stream = sync.stream(TaskRequest(task="hold on"))
        reading = in_thread(lambda: list(stream))
        assert holding.wait(GUARD_S)
        sync.cancel(stream.task_id, "stop reading")
        events = reading.result(GUARD_S)
        assert events[-1].kind == "task.canceled"
        assert events[-1].reason == "stop reading"


def test_a_stream_dropped_without_closing_cancels_its_task(tmp_path: Path) -> None:
    with build(tmp_path, [call("hold"), ScriptedTurn(content="never")]) as sync:
        events = sync.stream(TaskRequest(task="hold on"))
        task_id = events.task_id
        for event in events:
            if event.kind == "tool.started":
                break
        del events, event  # a for loop left early, the iterator forgotten
        deadline = time.monotonic() + GUARD_S
        while sync.get_task(task_id).status is not TaskStatus.CANCELED:
            assert time.monotonic() < deadline, "the dropped stream's task still runs"
            time.sleep(0.01)
        assert released == ["core-agent-kernel"]


def test_closing_the_kernel_ends_a_stream_being_read_with_a_clear_error(tmp_path: Path) -> None:
    sync = build(tmp_path, [call("hold"), ScriptedTurn(content="never")])
    stream = sync.stream(TaskRequest(task="hold on"))
    reading = in_thread(lambda: [event.kind for event in stream])
    assert holding.wait(GUARD_S)
    sync.close()
    with pytest.raises(KernelClosedError, match="closed while this stream ran"):
        reading.result(GUARD_S)


def test_a_stream_raises_the_kernels_error_in_the_iterating_thread(tmp_path: Path) -> None:
    with build(tmp_path, [ScriptedTurn(content="hi")]) as sync:
        session = sync.call(sync.kernel.create_session, user_id="ada")
        sync.call(sync.kernel.close_session, session.session_id)
        stream = sync.stream(TaskRequest(task="hello", session_id=session.session_id))
        with pytest.raises(SessionClosedError):
            in_thread(lambda: list(stream)).result(GUARD_S)


def test_close_stops_a_running_task_keeps_a_waiting_one_and_joins_the_loop_thread(
    tmp_path: Path,
) -> None:
    turns = [call("hold"), ScriptedTurn(content="never")]
    sync = build(tmp_path, turns)
    events = Events()
    sync.on_event(events)
    blocked = in_thread(lambda: sync.execute_task(TaskRequest(task="hold on")))
    assert holding.wait(GUARD_S)
    running_id = events.wait_for("task.started").task_id
    sync.close()
    with pytest.raises(KernelClosedError):
        blocked.result(GUARD_S)
    assert released == ["core-agent-kernel"]
    assert "core-agent-kernel" not in {t.name for t in threading.enumerate()}
    assert sync.closed
    sync.close()  # again: nothing happens
    for later in (
        lambda: sync.get_task(running_id),
        lambda: sync.submit(TaskRequest(task="x")),
        lambda: sync.stream(TaskRequest(task="x")),
        lambda: sync.execute_task(TaskRequest(task="x")),
    ):
        with pytest.raises(KernelClosedError, match="closed"):
            later()
    with build(tmp_path, turns) as reopened:
        assert reopened.get_task(running_id).status is TaskStatus.CANCELED


def test_close_leaves_a_task_that_waits_for_a_human_waiting(tmp_path: Path) -> None:
    turns = [call("launch", target="probe"), ScriptedTurn(content="Probe launched.")]
    with build(tmp_path, turns) as sync:
        waiting = sync.execute_task(TaskRequest(task="launch the probe"))
        assert waiting.status is TaskStatus.WAITING_APPROVAL
    with build(tmp_path, turns) as reopened:
        assert reopened.get_task(waiting.task_id).status is TaskStatus.WAITING_APPROVAL
        assert waiting.pending_approval is not None
        decision = ApprovalDecision(request_id=waiting.pending_approval, approved=True)
        result = reopened.resolve_approval(waiting.pending_approval, decision)
        assert result.status is TaskStatus.SUCCEEDED and ran == ["launch probe"]


class Capital(BaseModel):
    city: str


def test_errors_raised_in_the_kernel_surface_in_the_calling_thread_as_the_same_types(
    tmp_path: Path,
) -> None:
    with build(
        tmp_path, [ScriptedTurn(content="no JSON here"), ScriptedTurn(content="still none")]
    ) as sync:
        with pytest.raises(TaskNotFoundError) as not_found:
            in_thread(lambda: sync.get_task("nope")).result(GUARD_S)
        assert not_found.value.task_id == "nope"
        with pytest.raises(TaskFailedError) as failed:
            in_thread(
                lambda: sync.execute_task(TaskRequest(task="capital?"), response_model=Capital)
            ).result(GUARD_S)
        assert failed.value.result.status is TaskStatus.FAILED
        with pytest.raises(UsageError, match="not 'b'"):
            sync.resolve_approval("b", ApprovalDecision(request_id="a", approved=True))


def test_a_blocking_call_from_the_loop_thread_is_refused_with_the_reason(tmp_path: Path) -> None:
    holder: list[SyncKernel] = []

    @tool
    async def peek() -> str:
        """Call the facade from inside the kernel (a mistake)."""
        try:
            holder[0].get_task("anything")
        except UsageError as exc:
            return str(exc)
        return "no error"

    turns = [call("peek"), ScriptedTurn(content="done")]
    with build(tmp_path, turns, tools=[peek]) as sync:
        holder.append(sync)
        result = sync.execute_task(TaskRequest(task="peek"))
        (completed,) = [e for e in sync.task_events(result.task_id) if e.kind == "tool.completed"]
        assert "event-loop thread" in completed.result.content  # type: ignore[attr-defined]


def test_submit_knows_its_task_at_once_and_hears_only_its_own_events(tmp_path: Path) -> None:
    turns = [call("lookup", key="capital_fr"), ScriptedTurn(content="It is Paris.")]
    with build(tmp_path, turns) as sync:
        first, second = Events(), Events()
        one = sync.submit(TaskRequest(task="one"), on_event=first)
        two = sync.submit(TaskRequest(task="two"), on_event=second)
        assert one.task_id != two.task_id
        assert one.result(GUARD_S).task_id == one.task_id
        assert two.result(GUARD_S).task_id == two.task_id
        first.wait_for("task.succeeded")
        second.wait_for("task.succeeded")
        assert {e.task_id for e, _ in first.items} == {one.task_id}
        assert {e.task_id for e, _ in second.items} == {two.task_id}
        assert first.kinds()[0] == "task.queued"


def test_a_callback_that_raises_does_not_stop_the_next_ones(tmp_path: Path) -> None:
    with build(tmp_path, [ScriptedTurn(content="hi")]) as sync:

        def broken(event: TaskEvent) -> None:
            raise RuntimeError("a bug in the host")

        sync.on_event(broken)
        events = Events()
        subscription = sync.on_event(events)
        sync.execute_task(TaskRequest(task="hello"))
        events.wait_for("task.succeeded")
        subscription.cancel()
        count = len(events.items)
        sync.execute_task(TaskRequest(task="hello again"))
        sync.close()  # the callbacks queued so far have run
        assert len(events.items) == count


def test_create_sync_kernel_takes_create_kernels_arguments(tmp_path: Path) -> None:
    seen: list[str] = []
    record = core_agent.tool_hook(before=lambda call, context: seen.append(call.name))
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "lookup", "arguments": {"key": "capital_fr"}}]},
                {"content": "It is Paris."},
            ]
        )
    )
    settings = AgentSettings(data_dir=tmp_path / "data", scripted_model_script=script)
    with core_agent.create_sync_kernel(settings, tools=[lookup], tool_hooks=[record]) as sync:
        assert isinstance(sync, core_agent.SyncKernel)
        result = sync.execute_task(TaskRequest(task="Capital of France?"))
    assert result.status is TaskStatus.SUCCEEDED and result.output == "It is Paris."
    assert seen == ["lookup"] and ran == ["lookup capital_fr"]
    assert create_sync_kernel is core_agent.create_sync_kernel


def test_close_lets_go_of_the_hosts_callbacks(tmp_path: Path) -> None:
    """A GUI window holds the handle and the handle its callbacks: close breaks the cycle."""

    class Window:
        def show(self, event: TaskEvent) -> None:
            pass

        def approve(self, request: ApprovalRequest) -> ApprovalDecision:
            return ApprovalDecision(request_id=request.request_id, approved=True)

    window = Window()
    gone = weakref.ref(window)
    sync = build(tmp_path, [ScriptedTurn(content="hi")], approval_callback=window.approve)
    sync.on_event(window.show)
    sync.execute_task(TaskRequest(task="hello"))
    sync.close()
    del window
    gc.collect()
    assert gone() is None


def test_a_session_is_retried_and_forked_through_the_facade(tmp_path: Path) -> None:
    turns = [ScriptedTurn(content=text) for text in ("one", "two", "two again")]
    with build(tmp_path, turns) as sync:
        for text in ("first", "second"):
            sync.execute_task(TaskRequest(task=text, session_id="chat"))
        retried = sync.retry_from_turn("chat", 2, task="second, said better")
        fork = sync.fork_session("chat", at_turn=1, new_session_id="branch")
        transcript = sync.call(sync.kernel.session_transcript, "chat")
    assert retried.status is TaskStatus.SUCCEEDED
    assert fork.forked_from is not None and (fork.session_id, fork.forked_from.turn) == (
        "branch",
        1,
    )
    live = [e.message.content for e in transcript.entries if e.superseded_by is None]
    assert live == ["first", "one", "second, said better", retried.output]
