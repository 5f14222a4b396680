"""The public facade: run tasks, stream their events, inspect tasks and traces."""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
from pydantic import BaseModel

from core_agent.contracts.errors import ConfigurationError, RunError
from core_agent.contracts.event_bus import IEventBus
from core_agent.contracts.executor import ExecutionContext, IExecutor
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore, Span
from core_agent.kernel.state_machine import check_transition
from core_agent.observability.tracer import Tracer, new_trace_id
from shared.agent_protocol import (
    EPHEMERAL_EVENT_KINDS,
    AgentEvent,
    StrategyMode,
    StrategySelected,
    SystemMessage,
    TaskCanceled,
    TaskFailed,
    TaskQueued,
    TaskRequest,
    TaskResult,
    TaskStarted,
    TaskState,
    TaskStatus,
    TaskSucceeded,
    UserMessage,
)

log = logging.getLogger(__name__)

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

    def make(self, event_type: type[BaseModel], /, **fields: Any) -> BaseModel:
        event = event_type(
            event_id=uuid.uuid4().hex,
            task_id=self._task_id,
            seq=self._seq,
            occurred_at=_now(),
            **fields,
        )
        self._seq += 1
        return event

    async def __call__(self, event_type: type[BaseModel], /, **fields: Any) -> None:
        event = self.make(event_type, **fields)
        if getattr(event, "kind", None) not in EPHEMERAL_EVENT_KINDS:
            await self._task_store.append_event(event)
        await self._event_bus.publish(event)


class AgentKernel:
    """Runs tasks through an executor, keeping their state, events and spans durable.

    Use as an async context manager (or call ``aclose``) so stores are closed.
    """

    def __init__(
        self,
        *,
        task_store: ITaskStore,
        trace_store: ITraceStore,
        event_bus: IEventBus,
        executors: Mapping[str, IExecutor],
        strategy_mode: str = "adaptive",
        max_turns: int = 12,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    ) -> None:
        if not executors:
            raise ConfigurationError("the kernel needs at least one executor")
        self._task_store = task_store
        self._trace_store = trace_store
        self._event_bus = event_bus
        self._executors = dict(executors)
        self._strategy_mode = strategy_mode
        self._max_turns = max_turns
        self._system_prompt = system_prompt
        self._running: dict[str, anyio.CancelScope] = {}

    @property
    def event_bus(self) -> IEventBus:
        """Subscribe here to observe every task's events."""
        return self._event_bus

    async def __aenter__(self) -> AgentKernel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the stores."""
        await self._task_store.close()
        await self._trace_store.close()

    async def execute_task(self, request: TaskRequest) -> TaskResult:
        """Run ``request`` to the end and return its result.

        A run failure (model error, turn limit...) gives a ``failed`` result with the reason;
        misuse (e.g. forcing a strategy that is not installed) raises ``UsageError`` before a
        task is created.
        """
        return await self._execute(request, uuid.uuid4().hex)

    async def stream_task(self, request: TaskRequest) -> AsyncGenerator[AgentEvent, None]:
        """Run ``request`` and yield its events as they happen, ending with the final one.

        Leaving the loop early cancels the task (it ends ``canceled``). Wrap the iterator in
        ``contextlib.aclosing`` when you may break out of it, so it closes in your task.
        """
        task_id = uuid.uuid4().hex
        send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=math.inf)
        failure: list[BaseException] = []

        def forward(event: BaseModel) -> None:
            if getattr(event, "task_id", None) == task_id:
                send.send_nowait(event)

        subscription = self._event_bus.subscribe(None, forward)

        async def run() -> None:
            try:
                await self._execute(request, task_id)
            except Exception as exc:
                failure.append(exc)
            finally:
                send.close()

        closed_early = False
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(run)
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

    async def get_task(self, task_id: str) -> TaskState:
        """The stored task; ``TaskNotFoundError`` if there is none."""
        return await self._task_store.get_task(task_id)

    async def list_tasks(
        self, *, session_id: str | None = None, status: TaskStatus | None = None, limit: int = 50
    ) -> list[TaskState]:
        """Stored tasks, newest first."""
        return await self._task_store.list_tasks(session_id=session_id, status=status, limit=limit)

    async def task_events(self, task_id: str) -> list[BaseModel]:
        """The persisted events of a task, in order."""
        await self._task_store.get_task(task_id)
        return list(await self._task_store.list_events(task_id))

    async def task_spans(self, task_id: str) -> list[Span]:
        """The spans of a task, in start order."""
        return await self._trace_store.list_spans(task_id=task_id)

    async def cancel_task(self, task_id: str, reason: str = "canceled by host") -> None:
        """Cancel a task: running here, it is interrupted; queued elsewhere, it is marked."""
        scope = self._running.get(task_id)
        if scope is not None:
            scope.cancel()
            return
        state = await self._task_store.get_task(task_id)
        check_transition(task_id, state.status, TaskStatus.CANCELED)
        persisted = await self._task_store.list_events(task_id)
        next_seq = max((getattr(e, "seq", 0) for e in persisted), default=0) + 1
        events = _TaskEvents(self._task_store, self._event_bus, task_id, next_seq)
        event = events.make(TaskCanceled, reason=reason, usage=state.usage)
        await self._task_store.transition(
            task_id, from_status=state.status, to_status=TaskStatus.CANCELED, event=event
        )
        await self._event_bus.publish(event)

    def _pick_executor(self, request: TaskRequest) -> tuple[IExecutor, str]:
        if request.force_mode is not None:
            wanted: StrategyMode = request.force_mode
            reason = f"forced by the request (force_mode={wanted})"
        elif self._strategy_mode != "adaptive":
            wanted = "plan_execute" if self._strategy_mode == "plan_execute" else "react"
            reason = f"forced by configuration (AGENT_STRATEGY_MODE={self._strategy_mode})"
        else:
            wanted = "react"
            reason = "adaptive routing: react is the only strategy installed"
        executor = self._executors.get(wanted)
        if executor is None:
            raise ConfigurationError(
                f"strategy {wanted!r} is not installed; "
                f"available: {', '.join(sorted(self._executors))}"
            )
        return executor, reason

    async def _execute(self, request: TaskRequest, task_id: str) -> TaskResult:
        executor, reason = self._pick_executor(request)
        now = _now()
        state = TaskState(
            task_id=task_id,
            session_id=request.session_id or uuid.uuid4().hex,
            trace_id=new_trace_id(),
            status=TaskStatus.QUEUED,
            request=request,
            created_at=now,
            updated_at=now,
        )
        events = _TaskEvents(self._task_store, self._event_bus, task_id)
        queued = events.make(
            TaskQueued, session_id=state.session_id, trace_id=state.trace_id, request=request
        )
        await self._task_store.create_task(state, queued)
        await self._event_bus.publish(queued)
        return await self._run(state, executor, reason, events)

    async def _move(
        self,
        state: TaskState,
        current: TaskStatus,
        target: TaskStatus,
        event: BaseModel,
        **fields: Any,
    ) -> None:
        check_transition(state.task_id, current, target)
        await self._task_store.transition(
            state.task_id, from_status=current, to_status=target, event=event, **fields
        )
        await self._event_bus.publish(event)

    async def _run(
        self, state: TaskState, executor: IExecutor, reason: str, events: _TaskEvents
    ) -> TaskResult:
        context = ExecutionContext(
            task_id=state.task_id,
            session_id=state.session_id,
            trace_id=state.trace_id,
            request=state.request,
            messages=[
                SystemMessage(content=state.request.system_prompt or self._system_prompt),
                UserMessage(content=state.request.task),
            ],
            max_turns=state.request.max_turns or self._max_turns,
            emit=events,
        )
        await self._move(
            state,
            TaskStatus.QUEUED,
            TaskStatus.RUNNING,
            events.make(TaskStarted),
            strategy=executor.strategy,
        )
        await events(StrategySelected, strategy=executor.strategy, reason=reason, features={})
        tracer = Tracer(self._trace_store, trace_id=state.trace_id, task_id=state.task_id)
        try:
            with anyio.CancelScope() as scope:
                self._running[state.task_id] = scope
                async with tracer.span("task", "task") as root:
                    root.attributes["strategy"] = executor.strategy
                    context.parent_span_id = root.span_id
                    try:
                        outcome = await executor.run(context)
                    finally:
                        usage = context.stats.usage
                        root.tokens_in, root.tokens_out = usage.input_tokens, usage.output_tokens
                        root.cost_usd = usage.cost_usd
            if scope.cancelled_caught:
                return await self._finish_canceled(state, context, events, "canceled by host")
        except RunError as exc:
            return await self._finish_failed(state, context, events, exc)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._finish_canceled(state, context, events, "the caller was canceled")
            raise
        except Exception as exc:
            # A bug, not a run failure: still record it so nothing is left "running".
            with anyio.CancelScope(shield=True):
                await self._finish_failed(state, context, events, exc)
            raise
        finally:
            self._running.pop(state.task_id, None)
        usage = context.stats.usage
        await self._move(
            state,
            TaskStatus.RUNNING,
            TaskStatus.SUCCEEDED,
            events.make(TaskSucceeded, output=outcome.output, usage=usage),
            output=outcome.output,
            usage=usage,
        )
        return self._result(state, context, TaskStatus.SUCCEEDED, output=outcome.output)

    async def _finish_failed(
        self, state: TaskState, context: ExecutionContext, events: _TaskEvents, exc: Exception
    ) -> TaskResult:
        error = str(exc) or type(exc).__name__
        usage = context.stats.usage
        await self._move(
            state,
            TaskStatus.RUNNING,
            TaskStatus.FAILED,
            events.make(TaskFailed, error=error, error_type=type(exc).__name__, usage=usage),
            error=error,
            usage=usage,
        )
        return self._result(
            state, context, TaskStatus.FAILED, error=error, error_type=type(exc).__name__
        )

    async def _finish_canceled(
        self, state: TaskState, context: ExecutionContext, events: _TaskEvents, reason: str
    ) -> TaskResult:
        usage = context.stats.usage
        await self._move(
            state,
            TaskStatus.RUNNING,
            TaskStatus.CANCELED,
            events.make(TaskCanceled, reason=reason, usage=usage),
            error=reason,
            usage=usage,
        )
        return self._result(state, context, TaskStatus.CANCELED, error=reason)

    @staticmethod
    def _result(
        state: TaskState,
        context: ExecutionContext,
        status: TaskStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        error_type: str | None = None,
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
        )
