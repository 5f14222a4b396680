"""The public facade: run tasks, stream their events, inspect tasks and traces.

It also answers the questions a task asks a human (``resolve_approval``), carries on tasks
whose process died (``resume``, ``recover``) and cancels tasks wherever they run.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar, overload

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import BaseModel

from core_agent.contracts.approval_gateway import ApprovalCallback, IApprovalGateway
from core_agent.contracts.errors import (
    ApprovalPendingError,
    ConfigurationError,
    CoreAgentError,
    CorruptStateError,
    InvalidTransitionError,
    RunError,
    TaskFailedError,
    TaskHeldError,
    UsageError,
)
from core_agent.contracts.event_bus import IEventBus
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.contracts.memory_store import IMemoryStore
from core_agent.contracts.strategy_router import IStrategyRouter, RoutingDecision
from core_agent.contracts.task_store import ApprovalDecided, ITaskStore
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.contracts.tool_sandbox import IToolSandbox
from core_agent.contracts.trace_store import ITraceStore, Span
from core_agent.kernel.state_machine import check_transition
from core_agent.kernel.task_lease import LeaseWatch, lease_until, new_owner, owner_is_dead
from core_agent.memory.hybrid_memory import recall_message
from core_agent.observability.tracer import Tracer, new_trace_id
from core_agent.orchestration.react_loop import UNTRUSTED_NOTICE
from core_agent.safety.approval_gateway import CallbackApprovalGateway, denial
from shared.agent_protocol import (
    EPHEMERAL_EVENT_KINDS,
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    RiskLevel,
    StrategySelected,
    SystemMessage,
    TaskCanceled,
    TaskEvent,
    TaskFailed,
    TaskQueued,
    TaskRequest,
    TaskResult,
    TaskResumed,
    TaskStarted,
    TaskState,
    TaskStatus,
    TaskSucceeded,
    TaskWaitingApproval,
    UserMessage,
)

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


class Closable(Protocol):
    """Something the kernel releases when it closes (a store)."""

    async def close(self) -> None:
        """Release resources."""


DEFAULT_SYSTEM_PROMPT = (
    "You are a capable assistant working inside an application. Use the available tools when "
    "they help you answer accurately; call several when needed. When you have the answer, "
    "reply with it directly and concisely."
)


def _now() -> datetime:
    return datetime.now(UTC)


class _TaskEvents:
    """Numbers, persists and publishes one task's events, in order."""

    def __init__(
        self, task_store: ITaskStore, event_bus: IEventBus, task_id: str, next_seq: int = 1
    ) -> None:
        self._task_store = task_store
        self._event_bus = event_bus
        self._task_id = task_id
        self._seq = next_seq

    def make(self, event_type: type[TaskEvent], /, **fields: Any) -> TaskEvent:
        event = event_type(
            event_id=uuid.uuid4().hex,
            task_id=self._task_id,
            seq=self._seq,
            occurred_at=_now(),
            **fields,
        )
        self._seq += 1
        return event

    def follow(self, stored: TaskEvent) -> None:
        """Number the next events after ``stored``, which the store numbered itself."""
        self._seq = max(self._seq, stored.seq + 1)

    async def __call__(self, event_type: type[TaskEvent], /, **fields: Any) -> None:
        event = self.make(event_type, **fields)
        if event.kind in EPHEMERAL_EVENT_KINDS:
            await self._event_bus.publish(event)
            return
        await self._task_store.append_event(event)

        async def publish() -> None:
            await self._event_bus.publish(event)

        # Subscribers hear of an event once it is durable (after the step's unit of work).
        if not self._task_store.after_commit(publish):
            await publish()


class AgentKernel:
    """Routes each task to a strategy and runs it, keeping state, events and spans durable.

    Use as an async context manager (or call ``aclose``) so stores are closed.
    ``long_term_memory`` builds the store whose ``recall_k`` items most relevant to a new task
    are put after its system prompt; it is called on the first task, not before.
    ``sandbox`` is the default sandbox: each task records its settings (with the request's own
    workspace roots, if any) and runs under them, also when another process resumes it.
    """

    def __init__(
        self,
        *,
        task_store: ITaskStore,
        trace_store: ITraceStore,
        event_bus: IEventBus,
        router: IStrategyRouter,
        tools: IToolRegistry,
        executors: Mapping[str, IExecutor],
        max_turns: int = 12,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        closables: Sequence[Closable] = (),
        approval_gateway: IApprovalGateway | None = None,
        approval_timeout_s: float = 600.0,
        long_term_memory: Callable[[], IMemoryStore] | None = None,
        memory_namespace: str = "default",
        recall_k: int = 3,
        sandbox: IToolSandbox | None = None,
        lease_s: float = 30.0,
        cancel_check_s: float = 1.0,
        recovery: str = "resume",
        owner: str | None = None,
    ) -> None:
        if not executors:
            raise ConfigurationError("the kernel needs at least one executor")
        self._task_store = task_store
        self._trace_store = trace_store
        self._event_bus = event_bus
        self._router = router
        self._tools = tools
        self._executors = dict(executors)
        self._max_turns = max_turns
        self._system_prompt = system_prompt
        self._closables = closables
        self._approval_gateway = approval_gateway
        self._approval_timeout_s = approval_timeout_s
        self._long_term_memory = long_term_memory
        self._memory_namespace = memory_namespace
        self._recall_k = recall_k
        self._sandbox = sandbox
        self._running: dict[str, tuple[anyio.CancelScope, LeaseWatch]] = {}
        self._lease_s = lease_s
        self._cancel_check_s = cancel_check_s
        if recovery not in ("resume", "fail", "off"):
            raise ConfigurationError(f"recovery must be resume, fail or off, not {recovery!r}")
        self._recovery = recovery
        self.owner = owner or new_owner()
        """This kernel's name on the tasks it runs (see ``TaskState.owner``)."""
        self._background: anyio.abc.TaskGroup | None = None
        self._background_host: int | None = None
        self._closing = False
        self._background_done: anyio.Event | None = None
        if sandbox is not None and sandbox.confinement == "unconfined":
            log.warning(
                "AGENT_SANDBOX_MODE=unconfined: commands run without operating-system "
                "confinement; they can write anywhere this user can and use the network"
            )

    def set_approval_callback(self, callback: ApprovalCallback | None) -> None:
        """Ask ``callback`` (sync or async) about risky calls from now on.

        With ``None``, risky calls wait durably until ``resolve_approval``.
        """
        self._approval_gateway = (
            CallbackApprovalGateway(callback, timeout_s=self._approval_timeout_s)
            if callback is not None
            else None
        )

    def set_approval_gateway(self, gateway: IApprovalGateway | None) -> None:
        """Reach humans through ``gateway`` from now on."""
        self._approval_gateway = gateway

    @property
    def event_bus(self) -> IEventBus:
        """Subscribe here to observe every task's events."""
        return self._event_bus

    async def __aenter__(self) -> AgentKernel:
        """Start: tasks whose process died are recovered in the background (``recovery``).

        The background work lives in a task group entered here, so the kernel must be left
        (``__aexit__``) in the task that entered it, as anyio requires of any task group: use
        ``async with kernel:``, or from another thread
        ``BlockingPortal.wrap_async_context_manager(kernel)``.
        """
        if self._recovery != "off" and self._background is None:
            self._background = anyio.create_task_group()
            await self._background.__aenter__()
            self._background_host = anyio.get_current_task().id
            self._background_done = anyio.Event()
            self._background.start_soon(self._recover_in_background, self._background_done)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _recover_in_background(self, done: anyio.Event) -> None:
        try:
            await self.recover()
        except CoreAgentError as exc:
            log.warning("recovering tasks failed: %s", exc)
        finally:
            done.set()

    async def _stop_background(self) -> None:
        background, self._background = self._background, None
        if background is None:
            return
        # Tasks it was recovering are left to be recovered again, not ended as canceled.
        self._closing = True
        background.cancel_scope.cancel()
        if anyio.get_current_task().id == self._background_host:
            await background.__aexit__(None, None, None)
        else:
            # Closed from another task than the one that entered: that task's scope cannot be
            # left from here, but the work in it is stopped and waited for all the same.
            log.warning(
                "AgentKernel closed in another task than the one that entered it; use "
                "`async with kernel:` (or BlockingPortal.wrap_async_context_manager)"
            )
            if self._background_done is not None:
                with anyio.CancelScope(shield=True):
                    await self._background_done.wait()

    async def aclose(self) -> None:
        """Stop background recovery, close the stores and stop the sandbox's processes."""
        await self._stop_background()
        await self._task_store.close()
        await self._trace_store.close()
        for closable in self._closables:
            await closable.close()
        if self._sandbox is not None:
            await self._sandbox.close()

    async def route(self, request: TaskRequest) -> RoutingDecision:
        """The strategy the kernel would use for ``request``, without running it."""
        return await self._router.route(request, self._specs(request))

    @overload
    async def execute_task(self, request: TaskRequest) -> TaskResult: ...

    @overload
    async def execute_task(self, request: TaskRequest, *, response_model: type[M]) -> M: ...

    async def execute_task(
        self, request: TaskRequest, *, response_model: type[M] | None = None
    ) -> TaskResult | M:
        """Run ``request`` to the end.

        Without ``response_model``: the task's result, whatever its status (a run failure is
        a ``failed`` result with the reason; a question for a human is ``waiting_approval``).

        With ``response_model``: the validated answer. The model's JSON is extracted, repaired
        and validated, with one self-correction round; if the task does not succeed,
        ``TaskFailedError`` carries its result (for an invalid answer, with the raw text and
        the validation error).

        Misuse (e.g. forcing a strategy that is not installed) raises ``UsageError`` before a
        task is created.
        """
        result = await self._execute(request, uuid.uuid4().hex, response_model)
        if response_model is None:
            return result
        if result.status is not TaskStatus.SUCCEEDED or result.structured_output is None:
            raise TaskFailedError(
                result, f"task {result.task_id} ended {result.status.value}: {result.error}"
            )
        return response_model.model_validate(result.structured_output)

    def stream_task(self, request: TaskRequest) -> AsyncGenerator[AgentEvent, None]:
        """Run ``request`` and yield its events as they happen, ending with the final one.

        Leaving the loop early cancels the task (it ends ``canceled``). Wrap the iterator in
        ``contextlib.aclosing`` when you may break out of it, so it closes in your task.
        """
        task_id = uuid.uuid4().hex
        return self._stream(task_id, lambda: self._execute(request, task_id, None))

    async def resolve_approval(self, request_id: str, decision: ApprovalDecision) -> TaskResult:
        """Answer a task's pending question and, if approved, resume it to the end.

        Works after a restart and from any process: the request is a row in the task store,
        and a request is decided once (a second decision is refused). For a tool call, the
        task resumes once every request of its turn has a decision (a denial is shown to the
        model); for a question, an approval resumes the task with the decision's ``reason``
        as guidance and a denial fails it.

        Raises:
            UsageError: No task is waiting on ``request_id`` (unknown, or already decided),
                or ``decision.request_id`` names another request.
            TaskHeldError: The task's live host is asking its own approver about it.
        """
        if decision.request_id != request_id:
            raise UsageError(
                f"the decision is for request {decision.request_id!r}, not {request_id!r}"
            )
        state, request = await self._pending_request(request_id)
        if request.tool_call is not None:
            return await self._resume_tool_call(state, request, decision)
        error = None
        if not decision.approved:
            error = f"a human declined to continue: {decision.reason or 'no reason given'}"
        then = TaskStatus.RUNNING if decision.approved else TaskStatus.FAILED
        await self._decide(state, decision, then=then, error=error)
        persisted = await self._task_store.list_events(state.task_id)
        events = self._continued_events(state.task_id, persisted)
        context = self._context(state, events, None)
        context.stats.usage = state.usage
        if error is not None:
            await events(TaskFailed, error=error, error_type="ApprovalDenied", usage=state.usage)
            return self._result(
                state, context, TaskStatus.FAILED, error=error, error_type="ApprovalDenied"
            )
        executor = self._executors.get(state.strategy or "react") or self._executors["react"]
        context.guidance = (
            f"A human reviewed earlier failures of this task.\n{request.question}\n"
            f"Their guidance: {decision.reason or '(none: retry as you see fit)'}"
        )
        context.resuming = True
        await events(TaskResumed, reason="a human answered", owner=self.owner)
        return await self._drive(state, executor, context, events)

    async def _decide(
        self,
        state: TaskState,
        decision: ApprovalDecision,
        *,
        then: TaskStatus,
        error: str | None = None,
    ) -> ApprovalDecided:
        """Record ``decision`` once (see ``ITaskStore.decide_approval``) and publish it.

        When it is the task's last open request, the task moves to ``then`` (held by this
        kernel when that is ``running``).

        Raises:
            UsageError: The request was decided meanwhile, or the task left
                ``waiting_approval``.
        """
        check_transition(state.task_id, TaskStatus.WAITING_APPROVAL, then)
        resolved = _TaskEvents(self._task_store, self._event_bus, state.task_id).make(
            ApprovalResolved, decision=decision
        )
        try:
            decided = await self._task_store.decide_approval(
                resolved,
                then=then,
                owner=self.owner,
                lease_until=lease_until(self._lease_s),
                error=error,
            )
        except InvalidTransitionError as exc:
            raise UsageError(
                f"task {state.task_id} no longer waits for a decision ({exc.current})"
            ) from exc
        if decided is None:
            record = await self._task_store.approval(decision.request_id)
            raise _already_decided(decision.request_id, record.decision if record else None)
        await self._event_bus.publish(decided.event)
        return decided

    async def resume(self, task_id: str) -> TaskResult:
        """Carry on a task whose process died, from its last checkpoint, to the end.

        The kernel takes the task's lease (so no other process runs it too), and the run goes
        on from the last step its executor saved: a finished tool call is not run again, one
        that was interrupted runs again only when that is harmless, else a human is asked. A
        task that was queued and never started starts now.

        Raises:
            TaskNotFoundError: No such task.
            UsageError: It runs in a live process (its lease holds), it waits for a human
                (use ``resolve_approval``), or it already ended.
        """
        state = await self._free_if_owner_died(await self._task_store.get_task(task_id))
        if state.status is TaskStatus.WAITING_APPROVAL:
            raise UsageError(
                f"task {task_id} waits for a human's decision: answer it with resolve_approval"
            )
        if state.status not in (TaskStatus.RUNNING, TaskStatus.QUEUED):
            raise UsageError(f"task {task_id} already ended ({state.status.value})")
        if task_id in self._running or not await self._task_store.acquire_lease(
            task_id, owner=self.owner, until=lease_until(self._lease_s)
        ):
            raise UsageError(
                f"task {task_id} runs in a live process ({state.owner}, lease until "
                f"{state.lease_expires_at:%H:%M:%S} UTC): cancel it there, or wait for it"
            )
        state = await self._task_store.get_task(task_id)
        persisted = await self._task_store.list_events(task_id)
        events = self._continued_events(task_id, persisted)
        if state.status is TaskStatus.QUEUED:
            return await self._start(state, events, None, sandbox=self._task_sandbox(state))
        executor = self._executors.get(state.strategy or "react") or self._executors["react"]
        context = self._context(state, events, None)
        context.stats.usage = state.usage
        context.resuming = True
        context.approval_decisions = _decisions(persisted)
        await events(TaskResumed, reason="taken over after its process stopped", owner=self.owner)
        return await self._drive(state, executor, context, events)

    async def recover(self, how: Literal["resume", "fail"] | None = None) -> list[TaskResult]:
        """Resume, or fail, every task whose process died (``how``, else ``AGENT_RECOVERY``).

        Tasks that are ``queued`` or ``running`` with no live lease (or whose owner is a
        process of this machine that died) are taken over one batch at a time, up to four at
        once. With ``fail`` each ends ``failed`` with the reason; with ``resume`` each runs to
        its end here (``resume``). A task another kernel takes first is left to it, and a task
        whose stored state is damaged is logged and left. Returns the results, in the order
        the tasks ended.
        """
        mode = how or self._recovery
        if mode == "off":
            return []
        results: list[TaskResult] = []
        tried: set[str] = set()
        limiter = anyio.CapacityLimiter(4)
        for status in (TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL):
            for state in await self._task_store.list_tasks(status=status, limit=1000):
                if state.task_id not in self._running:
                    await self._free_if_owner_died(state)

        async def take(state: TaskState) -> None:
            async with limiter:
                try:
                    if mode == "fail":
                        result = await self._fail_orphan(state)
                    else:
                        result = await self.resume(state.task_id)
                except UsageError:
                    return  # taken over by another kernel, or ended meanwhile
                except CorruptStateError as exc:
                    # That task alone: the others are recovered all the same.
                    log.error("task %s cannot be recovered: %s", state.task_id, exc)
                    return
                results.append(result)

        while True:
            orphans = [
                state
                for state in await self._task_store.orphaned_tasks(now=_now(), limit=100)
                if state.task_id not in tried and state.task_id not in self._running
            ]
            if not orphans:
                return results
            tried.update(state.task_id for state in orphans)
            async with anyio.create_task_group() as group:
                for state in orphans:
                    group.start_soon(take, state)

    async def _free_if_owner_died(self, state: TaskState) -> TaskState:
        """``state``, with its lease given up if its owner is a process here that died.

        A crashed host's tasks are free at once rather than when their leases run out.
        """
        if (
            state.owner is None
            or state.owner == self.owner
            or state.lease_expires_at is None
            or state.lease_expires_at <= _now()
            or not owner_is_dead(state.owner)
        ):
            return state
        await self._task_store.release_lease(state.task_id, owner=state.owner)
        return await self._task_store.get_task(state.task_id)

    async def _fail_orphan(self, state: TaskState) -> TaskResult:
        """End a task whose process died as ``failed``, saying so."""
        if not await self._task_store.acquire_lease(
            state.task_id, owner=self.owner, until=lease_until(self._lease_s)
        ):
            raise UsageError(f"task {state.task_id} is running in a live process")
        events = self._continued_events(
            state.task_id, await self._task_store.list_events(state.task_id)
        )
        error = "the process running this task stopped before it ended (AGENT_RECOVERY=fail)"
        try:
            await self._move(
                state,
                state.status,
                TaskStatus.FAILED,
                events.make(TaskFailed, error=error, error_type="ProcessLost", usage=state.usage),
                error=error,
            )
        except InvalidTransitionError as exc:
            raise UsageError(str(exc)) from exc
        return TaskResult(
            task_id=state.task_id,
            session_id=state.session_id,
            trace_id=state.trace_id,
            status=TaskStatus.FAILED,
            error=error,
            error_type="ProcessLost",
            usage=state.usage,
        )

    async def get_task(self, task_id: str) -> TaskState:
        """The stored task; ``TaskNotFoundError`` if there is none."""
        return await self._task_store.get_task(task_id)

    async def list_tasks(
        self, *, session_id: str | None = None, status: TaskStatus | None = None, limit: int = 50
    ) -> list[TaskState]:
        """Stored tasks, newest first."""
        return await self._task_store.list_tasks(session_id=session_id, status=status, limit=limit)

    async def task_events(self, task_id: str) -> list[TaskEvent]:
        """The persisted events of a task, in order."""
        await self._task_store.get_task(task_id)
        return list(await self._task_store.list_events(task_id))

    async def task_spans(self, task_id: str) -> list[Span]:
        """The spans of a task, in start order."""
        return await self._trace_store.list_spans(task_id=task_id)

    async def pending_approvals(self, limit: int = 1000) -> list[ApprovalRequest]:
        """Questions that tasks wait on, oldest first (they survive restarts).

        One query on the store's requests: a task whose stored state is damaged does not
        hide the others'.
        """
        return await self._task_store.pending_approvals(limit=limit)

    async def cancel_task(self, task_id: str, reason: str = "canceled by host") -> None:
        """Cancel a task wherever it runs.

        Running here, it is interrupted and ends ``canceled``. Running in another live
        process, the request is recorded and that process carries it out within
        ``AGENT_CANCEL_CHECK_S`` (its host gets a ``canceled`` result). Queued, waiting for a
        human, or left by a dead process, it is marked ``canceled`` at once.

        Raises:
            TaskNotFoundError: No such task.
            InvalidTransitionError: It already ended.
        """
        running = self._running.get(task_id)
        if running is not None:
            scope, watch = running
            watch.cancel_reason = reason
            scope.cancel()
            return
        state = await self._free_if_owner_died(await self._task_store.get_task(task_id))
        check_transition(task_id, state.status, TaskStatus.CANCELED)
        if (
            state.status in (TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL)
            and state.owner is not None
            and state.lease_expires_at is not None
            and state.lease_expires_at > _now()
        ):
            await self._task_store.request_cancel(task_id, reason)
            return
        events = self._continued_events(task_id, await self._task_store.list_events(task_id))
        event = events.make(TaskCanceled, reason=reason, usage=state.usage)
        await self._task_store.transition(
            task_id, from_status=state.status, to_status=TaskStatus.CANCELED, event=event
        )
        await self._event_bus.publish(event)

    async def _stream(
        self, task_id: str, run: Callable[[], Awaitable[TaskResult]]
    ) -> AsyncGenerator[AgentEvent, None]:
        send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=math.inf)
        failure: list[BaseException] = []

        def forward(event: BaseModel) -> None:
            if getattr(event, "task_id", None) == task_id:
                send.send_nowait(event)

        subscription = self._event_bus.subscribe(None, forward)

        async def drive() -> None:
            try:
                await run()
            except Exception as exc:
                failure.append(exc)
            finally:
                send.close()

        closed_early = False
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(drive)
                async with receive:
                    try:
                        async for event in receive:
                            yield event
                    except GeneratorExit:
                        # The consumer stopped listening: cancel the run (it ends "canceled")
                        # and wait for it here, instead of letting the exit tear the group.
                        closed_early = True
                        group.cancel_scope.cancel()
        finally:
            subscription.cancel()
        if failure and not closed_early:
            raise failure[0]

    def _continued_events(self, task_id: str, persisted: Sequence[TaskEvent]) -> _TaskEvents:
        """Event numbering that carries on after the task's persisted log."""
        next_seq = max((event.seq for event in persisted), default=0) + 1
        return _TaskEvents(self._task_store, self._event_bus, task_id, next_seq)

    def _specs(self, request: TaskRequest) -> list[Any]:
        names = list(request.tools) if request.tools is not None else None
        return self._tools.specs(names)

    async def _execute(
        self, request: TaskRequest, task_id: str, response_model: type[BaseModel] | None
    ) -> TaskResult:
        routing = await self._routing(request)
        sandbox = self._sandbox
        if sandbox is not None and request.workspace_roots:
            sandbox = sandbox.with_roots(request.workspace_roots)
        now = _now()
        state = TaskState(
            task_id=task_id,
            session_id=request.session_id or uuid.uuid4().hex,
            trace_id=new_trace_id(),
            status=TaskStatus.QUEUED,
            request=request,
            created_at=now,
            updated_at=now,
            sandbox=sandbox.profile() if sandbox is not None else None,
            owner=self.owner,
            lease_expires_at=lease_until(self._lease_s),
        )
        events = _TaskEvents(self._task_store, self._event_bus, task_id)
        queued = events.make(
            TaskQueued, session_id=state.session_id, trace_id=state.trace_id, request=request
        )
        await self._task_store.create_task(state, queued)
        await self._event_bus.publish(queued)
        return await self._start(state, events, response_model, sandbox=sandbox, routing=routing)

    async def _routing(
        self, request: TaskRequest
    ) -> tuple[RoutingDecision, IExecutor, datetime, datetime]:
        """The router's decision, the executor it names, and when routing began and ended.

        Raises:
            ConfigurationError: The strategy it names is not installed.
        """
        routed_at = _now()
        decision = await self._router.route(request, self._specs(request))
        routed_until = _now()
        executor = self._executors.get(decision.strategy)
        if executor is None:
            raise ConfigurationError(
                f"strategy {decision.strategy!r} is not installed; "
                f"available: {', '.join(sorted(self._executors))}"
            )
        return decision, executor, routed_at, routed_until

    async def _start(
        self,
        state: TaskState,
        events: _TaskEvents,
        response_model: type[BaseModel] | None,
        *,
        sandbox: IToolSandbox | None,
        routing: tuple[RoutingDecision, IExecutor, datetime, datetime] | None = None,
    ) -> TaskResult:
        """Start a queued task: route it (unless done), record the route, run it."""
        decision, executor, routed_at, routed_until = routing or await self._routing(state.request)
        await self._move(
            state,
            TaskStatus.QUEUED,
            TaskStatus.RUNNING,
            events.make(TaskStarted),
            strategy=executor.strategy,
        )
        tracer = Tracer(self._trace_store, trace_id=state.trace_id, task_id=state.task_id)
        async with self._task_store.unit_of_work():
            await tracer.record(
                "planning",
                "route",
                started_at=routed_at,
                ended_at=routed_until,
                attributes={
                    "strategy": decision.strategy,
                    "reason": decision.reason,
                    "forced": decision.forced,
                    "features": decision.features,
                },
            )
            await events(
                StrategySelected,
                strategy=decision.strategy,
                reason=decision.reason,
                features=decision.features,
            )
        context = self._context(state, events, response_model, sandbox=sandbox)
        await self._recall(state, context)
        return await self._drive(state, executor, context, events)

    async def _recall(self, state: TaskState, context: ExecutionContext) -> None:
        """Put the long-term memories relevant to the task after the system prompt."""
        if self._long_term_memory is None or self._recall_k < 1:
            return
        tracer = Tracer(self._trace_store, trace_id=state.trace_id, task_id=state.task_id)
        try:
            async with tracer.span("memory", "memory.recall") as span:
                items = await self._long_term_memory().search(
                    "long_term", self._memory_namespace, state.request.task, self._recall_k
                )
                span.attributes["recalled"] = [item.key for item in items]
                span.attributes["tainted"] = [item.key for item in items if item.tainted]
        except CoreAgentError as exc:
            # Memory helps a task; it is not worth failing one for.
            log.warning("task %s: long-term recall failed: %s", state.task_id, exc)
            return
        message = recall_message(items)
        if message is not None:
            context.messages.insert(1, message)
        tainted = [item.key for item in items if item.tainted]
        if tainted:
            await context.taint(
                "memory", reason=f"recalled memories written by tainted tasks: {tainted}"
            )

    def _task_sandbox(self, state: TaskState) -> IToolSandbox | None:
        """The sandbox the task recorded when it started (the default one if it recorded none).

        Raises:
            ConfigurationError: The recorded settings cannot be used here.
        """
        if self._sandbox is None or state.sandbox is None:
            return self._sandbox
        return self._sandbox.with_profile(state.sandbox)

    def _context(
        self,
        state: TaskState,
        events: _TaskEvents,
        response_model: type[BaseModel] | None,
        *,
        sandbox: IToolSandbox | None = None,
    ) -> ExecutionContext:
        system = state.request.system_prompt or self._system_prompt
        return ExecutionContext(
            task_id=state.task_id,
            session_id=state.session_id,
            trace_id=state.trace_id,
            request=state.request,
            messages=[
                SystemMessage(content=f"{system}\n\n{UNTRUSTED_NOTICE}"),
                UserMessage(content=state.request.task),
            ],
            max_turns=state.request.max_turns or self._max_turns,
            emit=events,
            output_type=response_model,
            request_approval=(
                _HumanApprovals(self, state, events) if self._approval_gateway else None
            ),
            tainted=state.tainted,
            sandbox=sandbox if sandbox is not None else self._task_sandbox(state),
            unit_of_work=self._task_store.unit_of_work,
        )

    async def _move(
        self,
        state: TaskState,
        current: TaskStatus,
        target: TaskStatus,
        event: TaskEvent,
        **fields: Any,
    ) -> None:
        check_transition(state.task_id, current, target)
        await self._task_store.transition(
            state.task_id, from_status=current, to_status=target, event=event, **fields
        )
        await self._event_bus.publish(event)

    async def _drive(
        self,
        state: TaskState,
        executor: IExecutor,
        context: ExecutionContext,
        events: _TaskEvents,
    ) -> TaskResult:
        """Run a ``running`` task's executor and record how it ended."""
        tracer = Tracer(self._trace_store, trace_id=state.trace_id, task_id=state.task_id)
        watch = LeaseWatch(
            self._task_store, state.task_id, self.owner, self._lease_s, self._cancel_check_s
        )
        try:
            with anyio.CancelScope() as scope:
                self._running[state.task_id] = (scope, watch)
                failure: Exception | None = None
                async with anyio.create_task_group() as watching:
                    watching.start_soon(watch.run, scope)
                    try:
                        async with tracer.span("task", "task") as root:
                            root.attributes["strategy"] = executor.strategy
                            context.parent_span_id = root.span_id
                            try:
                                outcome = await executor.run(context)
                            finally:
                                usage = context.stats.usage
                                root.tokens_in = usage.input_tokens
                                root.tokens_out = usage.output_tokens
                                root.cost_usd = usage.cost_usd
                    except Exception as exc:
                        # Raised past the group it would arrive wrapped in an ExceptionGroup.
                        failure = exc
                    watching.cancel_scope.cancel()
                if failure is not None:
                    raise failure
            if scope.cancelled_caught:
                if watch.lost:
                    return await self._stored_result(state, context)
                reason = watch.cancel_reason or "canceled by host"
                return await self._finish_canceled(state, context, events, reason)
        except ApprovalPendingError as pending:
            return await self._suspend(state, context, events, pending)
        except (RunError, CorruptStateError) as exc:
            # A damaged checkpoint fails its task with the reason, like a run failure.
            return await self._finish_failed(state, context, events, exc)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                if self._closing:
                    # The kernel is closing: the task is not over, it is left for recovery.
                    await self._task_store.release_lease(state.task_id, owner=self.owner)
                else:
                    await self._finish_canceled(state, context, events, "the caller was canceled")
            raise
        except Exception as exc:
            # A bug, not a run failure: still record it so nothing is left "running".
            with anyio.CancelScope(shield=True):
                await self._finish_failed(state, context, events, exc)
            raise
        finally:
            self._running.pop(state.task_id, None)
        if outcome.escalation is not None:
            return await self._wait_for_human(state, context, events, outcome)
        usage = context.stats.usage
        try:
            await self._move(
                state,
                TaskStatus.RUNNING,
                TaskStatus.SUCCEEDED,
                events.make(TaskSucceeded, output=outcome.output, usage=usage),
                output=outcome.output,
                usage=usage,
            )
        except InvalidTransitionError:
            # Ended meanwhile by someone else (a cancel marked by another process that took
            # this one for dead): report what is stored rather than fail the host.
            return await self._stored_result(state, context)
        return self._result(
            state,
            context,
            TaskStatus.SUCCEEDED,
            output=outcome.output,
            structured=outcome.structured,
        )

    async def _suspend(
        self,
        state: TaskState,
        context: ExecutionContext,
        events: _TaskEvents,
        pending: ApprovalPendingError,
    ) -> TaskResult:
        """Record the requests and leave the task ``waiting_approval`` until they are decided."""
        for request in pending.requests:
            await events(ApprovalRequested, request=request)
        first = pending.requests[0].request_id
        usage = context.stats.usage
        await self._move(
            state,
            TaskStatus.RUNNING,
            TaskStatus.WAITING_APPROVAL,
            events.make(TaskWaitingApproval, request_id=first),
            usage=usage,
        )
        names = ", ".join(r.tool_call.name for r in pending.requests if r.tool_call)
        waiting = self._result(
            state,
            context,
            TaskStatus.WAITING_APPROVAL,
            error=f"waiting for a human to approve: {names}",
            pending_approval=first,
        )
        if self._approval_gateway is None:
            # resolve_approval() continues it, in this process or another.
            await self._task_store.release_lease(state.task_id, owner=self.owner)
            return waiting
        decisions: dict[str, ApprovalDecision | None] = {}

        async def ask(request: ApprovalRequest) -> None:
            decisions[request.request_id] = await self._ask_host(request)

        # The task stays ours while the host's approver is asked: nobody else decides.
        watch = LeaseWatch(
            self._task_store, state.task_id, self.owner, self._lease_s, self._cancel_check_s
        )
        async with anyio.create_task_group() as watching:
            watching.start_soon(watch.run, watching.cancel_scope)
            async with anyio.create_task_group() as group:
                for request in pending.requests:
                    group.start_soon(ask, request)
            watching.cancel_scope.cancel()
        if watch.cancel_reason is not None:
            return await self._finish_canceled(
                state, context, events, watch.cancel_reason, current=TaskStatus.WAITING_APPROVAL
            )
        result = waiting
        for request in pending.requests:
            decision = decisions.get(request.request_id)
            if decision is not None and not watch.lost:  # an unanswered request stays pending
                result = await self.resolve_approval(request.request_id, decision)
        if result.status is TaskStatus.WAITING_APPROVAL:
            await self._task_store.release_lease(state.task_id, owner=self.owner)
        return result

    async def _ask_host(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The gateway's decision; ``None`` when nobody can be asked now."""
        if self._approval_gateway is None:
            return None
        return await self._approval_gateway.ask(request)

    async def _wait_for_human(
        self,
        state: TaskState,
        context: ExecutionContext,
        events: _TaskEvents,
        outcome: ExecutionOutcome,
    ) -> TaskResult:
        assert outcome.escalation is not None
        request = ApprovalRequest(
            request_id=uuid.uuid4().hex,
            task_id=state.task_id,
            session_id=state.session_id,
            question=outcome.escalation.question,
            risk=RiskLevel.HIGH,
            reason=outcome.escalation.reason,
            created_at=_now(),
        )
        await events(ApprovalRequested, request=request)
        usage = context.stats.usage
        await self._move(
            state,
            TaskStatus.RUNNING,
            TaskStatus.WAITING_APPROVAL,
            events.make(TaskWaitingApproval, request_id=request.request_id),
            usage=usage,
        )
        await self._task_store.release_lease(state.task_id, owner=self.owner)
        return self._result(
            state,
            context,
            TaskStatus.WAITING_APPROVAL,
            error=outcome.escalation.reason,
            pending_approval=request.request_id,
        )

    async def _pending_request(self, request_id: str) -> tuple[TaskState, ApprovalRequest]:
        record = await self._task_store.approval(request_id)
        if record is None:
            raise UsageError(f"no task is waiting on approval request {request_id!r}")
        # Read before deciding: a task whose log is damaged must fail here, not half-resume.
        await self._task_store.list_events(record.request.task_id)
        if record.decision is not None:
            raise _already_decided(request_id, record.decision)
        state = await self._free_if_owner_died(
            await self._task_store.get_task(record.request.task_id)
        )
        if state.status is not TaskStatus.WAITING_APPROVAL:
            raise UsageError(
                f"task {state.task_id} is {state.status.value}: it no longer waits on "
                f"request {request_id!r}"
            )
        return state, record.request

    async def _resume_tool_call(
        self, state: TaskState, request: ApprovalRequest, decision: ApprovalDecision
    ) -> TaskResult:
        """Record a decision on a suspended call; resume once every request has one."""
        decided = await self._decide(state, decision, then=TaskStatus.RUNNING)
        # Recorded once the decision is: of two racing resolvers only one writes a span.
        await Tracer(self._trace_store, trace_id=state.trace_id, task_id=state.task_id).record(
            "approval",
            request.tool_call.name if request.tool_call else "question",
            started_at=request.created_at,
            ended_at=_now(),
            attributes={
                "request_id": request.request_id,
                "call_hash": request.call_hash,
                "approved": decision.approved,
                "scope": decision.scope,
                "decided_by": decision.decided_by,
                "reason": decision.reason,
            },
        )
        persisted = await self._task_store.list_events(state.task_id)
        events = self._continued_events(state.task_id, persisted)
        context = self._context(state, events, None)
        context.stats.usage = state.usage
        if decided.still_open:
            still_open = _open_requests(persisted)
            return self._result(
                state,
                context,
                TaskStatus.WAITING_APPROVAL,
                error="waiting for the other pending approvals",
                pending_approval=still_open[0].request_id if still_open else None,
            )
        await events(TaskResumed, reason="every pending approval has a decision", owner=self.owner)
        context.resuming = True
        context.approval_decisions = _decisions(persisted)
        executor = self._executors.get(state.strategy or "react") or self._executors["react"]
        return await self._drive(state, executor, context, events)

    async def _finish_failed(
        self, state: TaskState, context: ExecutionContext, events: _TaskEvents, exc: Exception
    ) -> TaskResult:
        error = str(exc) or type(exc).__name__
        usage = context.stats.usage
        try:
            await self._move(
                state,
                TaskStatus.RUNNING,
                TaskStatus.FAILED,
                events.make(TaskFailed, error=error, error_type=type(exc).__name__, usage=usage),
                error=error,
                usage=usage,
            )
        except InvalidTransitionError:
            return await self._stored_result(state, context)
        return self._result(
            state, context, TaskStatus.FAILED, error=error, error_type=type(exc).__name__
        )

    async def _finish_canceled(
        self,
        state: TaskState,
        context: ExecutionContext,
        events: _TaskEvents,
        reason: str,
        *,
        current: TaskStatus = TaskStatus.RUNNING,
    ) -> TaskResult:
        usage = context.stats.usage
        try:
            await self._move(
                state,
                current,
                TaskStatus.CANCELED,
                events.make(TaskCanceled, reason=reason, usage=usage),
                error=reason,
                usage=usage,
            )
        except InvalidTransitionError:
            return await self._stored_result(state, context)
        return self._result(state, context, TaskStatus.CANCELED, error=reason)

    async def _stored_result(self, state: TaskState, context: ExecutionContext) -> TaskResult:
        """The result as the store has it (the task was ended or taken over elsewhere)."""
        stored = await self._task_store.get_task(state.task_id)
        error = stored.error
        if stored.status is TaskStatus.RUNNING and stored.owner != self.owner:
            error = f"another kernel ({stored.owner}) took this task over and runs it"
        return self._result(state, context, stored.status, output=stored.output, error=error)

    @staticmethod
    def _result(
        state: TaskState,
        context: ExecutionContext,
        status: TaskStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        error_type: str | None = None,
        structured: dict[str, Any] | None = None,
        pending_approval: str | None = None,
    ) -> TaskResult:
        return TaskResult(
            task_id=state.task_id,
            session_id=state.session_id,
            trace_id=state.trace_id,
            status=status,
            output=output,
            error=error,
            error_type=error_type,
            usage=context.stats.usage,
            turns=context.stats.turns,
            structured_output=structured,
            pending_approval=pending_approval,
        )


class _HumanApprovals:
    """The kernel's ``ApprovalRequester`` for one task.

    It records the request, moves the task to ``waiting_approval``, calls the host's callback
    with a time limit, records the decision and moves the task back.

    Several calls of one turn may wait at once: the task is ``waiting_approval`` while any
    does, and each decision is matched to its own request by id.
    """

    def __init__(self, kernel: AgentKernel, state: TaskState, events: _TaskEvents) -> None:
        self._kernel = kernel
        self._state = state
        self._events = events
        self._waiting = 0
        self._lock = anyio.Lock()

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        kernel, state = self._kernel, self._state
        await self._events(ApprovalRequested, request=request)
        async with self._lock:
            self._waiting += 1
            if self._waiting == 1:
                try:
                    await kernel._move(
                        state,
                        TaskStatus.RUNNING,
                        TaskStatus.WAITING_APPROVAL,
                        self._events.make(TaskWaitingApproval, request_id=request.request_id),
                    )
                except InvalidTransitionError as exc:
                    # Still waiting: a parallel call's decision came while this request
                    # was being recorded, so the task was never moved back.
                    if exc.current != TaskStatus.WAITING_APPROVAL.value:
                        raise
        decision = denial(request, "the wait was interrupted")
        decided: ApprovalDecided | None = None
        try:
            decision = await self._ask(request)
        finally:
            # Recorded even when the run is canceled while it waits.
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    self._waiting -= 1
                    # A closing kernel records no answer nobody gave: the request stays
                    # open for a human, and the task is left for recovery once answered.
                    if not kernel._closing:
                        decided = await self._record(decision)
        if decided is None:
            # Decided elsewhere (the task was taken over, or ended): this run must not act on
            # its own answer.
            return denial(request, "the request was decided elsewhere")
        return decision

    async def _record(self, decision: ApprovalDecision) -> ApprovalDecided | None:
        """Record the decision; the last open request's moves the task back to running."""
        kernel = self._kernel
        try:
            decided = await kernel._task_store.decide_approval(
                self._events.make(ApprovalResolved, decision=decision),
                then=TaskStatus.RUNNING,
                owner=kernel.owner,
                lease_until=lease_until(kernel._lease_s),
            )
        except (InvalidTransitionError, TaskHeldError):
            return None
        if decided is not None:
            self._events.follow(decided.event)
            await kernel._event_bus.publish(decided.event)
        return decided

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        answer = await self._kernel._ask_host(request)
        return answer if answer is not None else denial(request, "no approver answered")


def _already_decided(request_id: str, decision: ApprovalDecision | None) -> UsageError:
    if decision is None:
        return UsageError(f"approval request {request_id!r} was already decided")
    verdict = "approved" if decision.approved else "denied"
    who = decision.decided_by or "someone"
    return UsageError(f"approval request {request_id!r} was already {verdict} by {who}")


def _open_requests(events: Sequence[BaseModel]) -> list[ApprovalRequest]:
    """The approval requests in a task's log that have no decision yet, oldest first."""
    open_requests: dict[str, ApprovalRequest] = {}
    for event in events:
        if isinstance(event, ApprovalRequested):
            open_requests[event.request.request_id] = event.request
        elif isinstance(event, ApprovalResolved):
            open_requests.pop(event.decision.request_id, None)
    return list(open_requests.values())


def _decisions(events: Sequence[BaseModel]) -> dict[str, ApprovalDecision]:
    """Every decision recorded in a task's log, by request id."""
    return {e.decision.request_id: e.decision for e in events if isinstance(e, ApprovalResolved)}
