"""Running a task's executor in this kernel and ending the task from how the run ended.

While a task runs here it is registered (so ``cancel`` reaches it), its lease is kept by a
``LeaseWatch`` (which also carries out cancel requests from other processes), and its run
is a ``run`` span under the task's root span, with the tokens and cost of this run. What the
executor returns or raises becomes one move of the task's ``TaskLifecycle``: an answer
succeeds, a question for a human or calls waiting for approval suspend it, a run error fails
it, a cancel cancels it, a lost lease leaves it to the kernel that took it over.

A drive is a unit of work (``ITaskStore.unit_of_work``) that the executor's steps and a wait
for a human stand apart from (``independent_work``): what is written around them (the
``run`` span, approval requests) commits with the move that follows, so a task's ending costs
one commit; what ``prepare`` writes is held there until it flushes it.

The run is also held to the task's usage limits here: its wall time (a deadline around the
run, ``failed`` when it passes, not ``canceled``), and for the session's limits, the usage the
session's other tasks have stored, read when the run starts (the executors check tokens, cost
and tool calls: ``orchestration.usage_limits``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import anyio
import anyio.lowlevel

from core_agent.contracts.errors import (
    ApprovalPendingError,
    CorruptStateError,
    LeaseLostError,
    RunError,
    UsageLimitExceededError,
    is_interruption,
    keyboard_interrupt_in,
)
from core_agent.contracts.executor import (
    ApprovalRequester,
    Escalation,
    ExecutionContext,
    ExecutionOutcome,
    IExecutor,
    RunStats,
)
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore
from core_agent.kernel.human_approvals import AskHuman
from core_agent.kernel.task_events import now
from core_agent.kernel.task_lease import LeaseWatch
from core_agent.kernel.task_lifecycle import TaskLifecycle
from core_agent.observability.log_context import task_log_context
from core_agent.observability.tracer import OpenSpan, Tracer, usage_attributes
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    RiskLevel,
    TaskResult,
    TaskState,
    TaskStatus,
    TokenUsage,
)

log = logging.getLogger(__name__)
SESSION_TASKS_COUNTED = 100_000
"""The most tasks of one session whose stored usage counts against the session's limits."""

Resolve = Callable[[str, ApprovalDecision], Awaitable[TaskResult]]
"""Records a human's decision on a request and carries the task on (``resolve_approval``)."""


@dataclass(slots=True)
class _Run:
    """A task this kernel runs, or is about to run."""

    scope: anyio.CancelScope | None = None
    """What stops the current phase (the executor's run, or asking the host's approver)."""
    cancel_reason: str | None = None
    lost: bool = False
    """The task was decided or ended elsewhere: stop without writing anything more."""


class TaskDriver:
    """Drives tasks to an ending in this kernel (see the module).

    ``claim`` reserves a task before the kernel takes its lease, so one kernel never runs a
    task twice at once; ``drive`` registers the run itself when nobody claimed it.
    ``closing`` is set when the kernel closes: the tasks it was ``recovering`` are then left
    to be recovered again instead of being ended ``canceled``; ``leaving`` (a host that
    shuts down) leaves every task whose run is cancelled that way.
    """

    def __init__(
        self,
        *,
        task_store: ITaskStore,
        trace_store: ITraceStore,
        owner: str,
        lease_s: float,
        cancel_check_s: float,
        ask_human: AskHuman,
        has_approver: Callable[[], bool],
        resolve: Resolve,
        carried_usage: Callable[[str], Awaitable[TokenUsage]] | None = None,
    ) -> None:
        self._task_store = task_store
        self._carried_usage = carried_usage
        self._trace_store = trace_store
        self._owner = owner
        self._lease_s = lease_s
        self._cancel_check_s = cancel_check_s
        self._ask_human = ask_human
        self._has_approver = has_approver
        self._resolve = resolve
        self._runs: dict[str, _Run] = {}
        self.closing = False
        self.leaving = False
        self.recovering: set[str] = set()

    def claim(self, task_id: str) -> bool:
        """Reserve ``task_id`` for a run here; ``False`` if it runs (or is reserved) already."""
        if task_id in self._runs:
            return False
        self._runs[task_id] = _Run()
        return True

    def unclaim(self, task_id: str) -> None:
        """Drop a reservation that did not lead to a run."""
        run = self._runs.get(task_id)
        if run is not None and run.scope is None:
            del self._runs[task_id]

    def runs(self, task_id: str) -> bool:
        """Whether ``task_id`` runs (or is about to run) in this kernel."""
        return task_id in self._runs

    def cancel(self, task_id: str, reason: str) -> bool:
        """Stop ``task_id``'s run here, to end ``canceled``; ``False`` if it does not run here."""
        run = self._runs.get(task_id)
        if run is None:
            return False
        run.cancel_reason = reason
        if run.scope is not None:
            run.scope.cancel()
        return True

    def lose(self, task_id: str) -> None:
        """Stop ``task_id``'s run here without ending it: it was decided or ended elsewhere."""
        run = self._runs.get(task_id)
        if run is not None:
            run.lost = True
            if run.scope is not None:
                run.scope.cancel()

    def left_alone(self, task_id: str) -> bool:
        """Whether ``task_id`` is being stopped only because the kernel closes (see class).

        Not once a cancel of it was asked for here (``cancel``): that one is carried out.
        """
        run = self._runs.get(task_id)
        if run is not None and run.cancel_reason is not None:
            return False
        return self.leaving or (self.closing and task_id in self.recovering)

    async def drive(
        self,
        lifecycle: TaskLifecycle,
        executor: IExecutor,
        context: ExecutionContext,
        *,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> TaskResult:
        """Run a ``running`` task's executor here and record how it ended.

        ``prepare`` runs first, under the same lease watch and cancel as the run (what a
        task does before its executor: recalling memories, fitting its session's history).
        Log records made meanwhile carry the task's ids (``log_context``).

        Raises:
            Exception: A bug in the executor (not a ``RunError``), after the task is recorded
                as failed. Cancellation of the caller propagates, the task ended ``canceled``
                (or left for recovery when the kernel closes).
            KeyboardInterrupt: Ctrl-C in the run, itself rather than in an exception group.
        """
        task_id = lifecycle.task_id
        run = self._runs.setdefault(task_id, _Run())
        try:
            with task_log_context(task_id, lifecycle.state.trace_id):
                log.info("task runs with the %s strategy", executor.strategy)
                result = await self._drive(run, lifecycle, executor, context, prepare)
                log.info("task %s", result.status.value)
                return result
        except BaseExceptionGroup as group:
            # Ctrl-C in a node or a member arrives wrapped in the run's task groups, where
            # the host's ``except KeyboardInterrupt`` would never see it.
            if (interrupt := keyboard_interrupt_in(group)) is not None:
                raise interrupt from group
            raise
        finally:
            if self._runs.get(task_id) is run:
                del self._runs[task_id]

    def _watch(self, task_id: str) -> LeaseWatch:
        return LeaseWatch(
            self._task_store, task_id, self._owner, self._lease_s, self._cancel_check_s
        )

    async def _drive(
        self,
        run: _Run,
        lifecycle: TaskLifecycle,
        executor: IExecutor,
        context: ExecutionContext,
        prepare: Callable[[], Awaitable[None]] | None,
    ) -> TaskResult:
        # The run's ending commits as one unit: the ``run`` span, the move that ends the
        # task and what follows it (``TaskLifecycle``). The executor's steps are apart
        # from it (each commits its own), and so is a wait for a human.
        async with self._task_store.unit_of_work():
            return await self._drive_in_unit(run, lifecycle, executor, context, prepare)

    async def _drive_in_unit(
        self,
        run: _Run,
        lifecycle: TaskLifecycle,
        executor: IExecutor,
        context: ExecutionContext,
        prepare: Callable[[], Awaitable[None]] | None,
    ) -> TaskResult:
        state, stats = lifecycle.state, context.run.stats
        tracer = Tracer.of(self._trace_store, state)
        watch = self._watch(state.task_id)
        try:
            if context.task.session_limits.bounded:
                context.task = replace(context.task, session_usage=await self._session_usage(state))
            with anyio.CancelScope() as scope:
                run.scope = scope
                if run.cancel_reason is not None:
                    scope.cancel()
                failure: Exception | None = None
                async with anyio.create_task_group() as watching:
                    watching.start_soon(watch.run, scope)
                    try:
                        if prepare is not None:
                            await prepare()
                        before = stats.usage
                        async with tracer.span("run", "run") as span:
                            span.attributes["strategy"] = executor.strategy
                            if context.run.resuming:
                                span.attributes["resumed"] = True
                            if context.task.limits.bounded:
                                span.attributes["limits"] = context.task.limits.model_dump(
                                    exclude_none=True
                                )
                            context.task = replace(context.task, parent_span_id=span.span_id)
                            try:
                                with (
                                    self._task_store.independent_work(),
                                    self._task_store.fenced(state.task_id, lifecycle.owner),
                                ):
                                    outcome = await _run_within_time(executor, context)
                            except UsageLimitExceededError as exc:
                                span.attributes["usage_limit"] = f"{exc.scope}:{exc.limit}"
                                raise
                            finally:
                                _count_run(span, before, stats.usage)
                        # A cancel asked for while the run went on without yielding is
                        # carried out: the run's writes join the ending, which no longer
                        # gives it a chance to arrive.
                        await anyio.lowlevel.checkpoint_if_cancelled()
                    except BaseException as exc:
                        if is_interruption(exc):
                            raise
                        # Raised past the group it would arrive wrapped in an ExceptionGroup.
                        # A SystemExit (or another BaseException) that got past the boundary
                        # of the code that raised it (a node's, an aggregation's) fails the
                        # run: not a cancel nobody asked for, nor the host's exit.
                        failure = exc if isinstance(exc, Exception) else _run_error(exc)
                    watching.cancel_scope.cancel()
                if failure is not None:
                    raise failure
            if scope.cancelled_caught:
                if watch.lost or run.lost:
                    return await lifecycle.stored_result(stats)
                reason = run.cancel_reason or watch.cancel_reason or "canceled by host"
                return await self._end_while_owner(
                    lifecycle, stats, lifecycle.cancel(reason, stats)
                )
        except LeaseLostError:
            # It stalled past its lease (asleep, stopped) and another kernel took the task
            # over: nothing of what it still had to write was stored; that kernel's is.
            return await lifecycle.stored_result(stats)
        except ApprovalPendingError as pending:
            return await self._suspend(run, lifecycle, context, pending)
        except (RunError, CorruptStateError) as exc:
            # A damaged checkpoint fails its task with the reason, like a run failure.
            return await self._end_while_owner(
                lifecycle,
                stats,
                lifecycle.fail(str(exc) or type(exc).__name__, type(exc).__name__, stats),
            )
        except anyio.get_cancelled_exc_class():
            # The caller gets no result: no session turn either (a retry it canceled leaves
            # the turn it retried retryable).
            lifecycle.on_end = None
            with anyio.CancelScope(shield=True):
                if self.left_alone(state.task_id):
                    await lifecycle.release()
                else:
                    # A cancel of this task may arrive with its caller's (a nested agent's
                    # parent canceled): its reason is the better one.
                    reason = run.cancel_reason or "the caller was canceled"
                    with (
                        contextlib.suppress(LeaseLostError),  # another kernel's task now
                        self._task_store.fenced(state.task_id, lifecycle.owner),
                    ):
                        await lifecycle.cancel(reason, stats)
            raise
        except Exception as exc:
            # A bug, not a run failure: still record it so nothing is left "running".
            lifecycle.on_end = None
            with anyio.CancelScope(shield=True):
                await lifecycle.fail(str(exc) or type(exc).__name__, type(exc).__name__, stats)
            raise
        if outcome.escalation is not None:
            return await self._wait_for_human(lifecycle, context, outcome)
        try:
            return await self._end_while_owner(lifecycle, stats, lifecycle.succeed(outcome, stats))
        except Exception as exc:
            # The answer's step commits with the ending (``ITaskStore.hand_over``): a record
            # of it that cannot be stored refuses the ending, as it refused the step before.
            # The task fails with why, in a commit that leaves those records out (a store's
            # own error too, rather than leaving the task running with nobody to end it).
            why = str(exc) or type(exc).__name__
            failed = lifecycle.fail(
                f"its answer could not be stored: {why}", type(exc).__name__, stats
            )
            return await self._end_while_owner(lifecycle, stats, failed)

    async def _end_while_owner(
        self, lifecycle: TaskLifecycle, stats: RunStats, ending: Awaitable[TaskResult]
    ) -> TaskResult:
        """``ending``'s result, its move made only while this kernel still owns the task.

        The run's own writes are fenced (``ITaskStore.fenced``); its ending is too (success,
        failure, cancel, suspension): a host that stalled after its last step must not end a
        task another kernel now runs. Moves made after this kernel gave the lease up on purpose
        (a cancel of a task left waiting) are conditioned on the status instead.
        """
        try:
            with self._task_store.fenced(lifecycle.task_id, lifecycle.owner):
                return await ending
        except LeaseLostError:
            return await lifecycle.stored_result(stats)

    async def _session_usage(self, state: TaskState) -> TokenUsage:
        """What the other tasks of ``state``'s session have used, as stored with them.

        With what the session carries from the one it was forked from (``carried_usage``).
        """
        tasks = await self._task_store.list_tasks(
            session_id=state.session_id, limit=SESSION_TASKS_COUNTED
        )
        carried = TokenUsage()
        if self._carried_usage is not None and state.session_id is not None:
            carried = await self._carried_usage(state.session_id)
        return sum((task.usage for task in tasks if task.task_id != state.task_id), start=carried)

    async def _suspend(
        self,
        run: _Run,
        lifecycle: TaskLifecycle,
        context: ExecutionContext,
        pending: ApprovalPendingError,
    ) -> TaskResult:
        """Leave the task ``waiting_approval``; ask the host's approver if it has one.

        Without an approver the lease is given up: ``resolve_approval`` continues the task,
        in this process or another. With one, the task stays held here while it is asked (a
        cancel reaches it meanwhile) and each answer is resolved as a human's decision.
        """
        stats = context.run.stats
        # A cancel that came as the step stopped for a human (here, or stored by another
        # process) ends the task: it must never wait for an approval that would run the call.
        reason = run.cancel_reason or await self._cancel_requested(lifecycle.task_id)
        if reason is not None:
            return await self._end_while_owner(lifecycle, stats, lifecycle.cancel(reason, stats))
        names = ", ".join(r.tool_call.name for r in pending.requests if r.tool_call)
        # Fenced like the other endings: a host that stalled before it must not leave a task
        # another kernel runs waiting for a human.
        try:
            with self._task_store.fenced(lifecycle.task_id, lifecycle.owner):
                waiting = await lifecycle.wait_for(
                    pending.requests, stats, error=f"waiting for a human to approve: {names}"
                )
        except LeaseLostError:
            return await lifecycle.stored_result(stats)
        with self._task_store.independent_work():
            return await self._ask_approver(run, lifecycle, context, pending, waiting)

    async def _ask_approver(
        self,
        run: _Run,
        lifecycle: TaskLifecycle,
        context: ExecutionContext,
        pending: ApprovalPendingError,
        waiting: TaskResult,
    ) -> TaskResult:
        """The rest of ``_suspend``, apart from the run's unit: a human may take long."""
        stats = context.run.stats
        if not self._has_approver():
            with anyio.CancelScope(shield=True):
                await lifecycle.release()
                # Requested while this process still held the task, so left to it to carry out.
                reason = run.cancel_reason or await self._cancel_requested(lifecycle.task_id)
                if reason is not None:
                    return await lifecycle.cancel(
                        reason, stats, current=TaskStatus.WAITING_APPROVAL
                    )
            return waiting
        decisions: dict[str, ApprovalDecision | None] = {}

        async def ask(request: ApprovalRequest) -> None:
            try:
                decisions[request.request_id] = await self._ask_human(request)
            except Exception:
                # A broken approver answers nothing: the request stays open for a human.
                log.exception("asking about request %s failed", request.request_id)

        watch = self._watch(lifecycle.task_id)
        try:
            with anyio.CancelScope() as scope:
                run.scope = scope
                if run.cancel_reason is not None:
                    scope.cancel()
                async with anyio.create_task_group() as watching:
                    watching.start_soon(watch.run, scope)
                    async with anyio.create_task_group() as group:
                        for request in pending.requests:
                            group.start_soon(ask, request)
                    watching.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # The caller went away while its approver was asked: the task must not stay
            # waiting, held by nobody, for a decision that would run the call later.
            lifecycle.on_end = None
            with anyio.CancelScope(shield=True):
                if self.left_alone(lifecycle.task_id):
                    await lifecycle.release()
                else:
                    await lifecycle.cancel(
                        "the caller was canceled", stats, current=TaskStatus.WAITING_APPROVAL
                    )
            raise
        reason = run.cancel_reason or watch.cancel_reason
        if reason is not None:
            return await lifecycle.cancel(reason, stats, current=TaskStatus.WAITING_APPROVAL)
        # The decisions resume the task in a run of its own.
        if self._runs.get(lifecycle.task_id) is run:
            del self._runs[lifecycle.task_id]
        result = waiting
        for request in pending.requests:
            decision = decisions.get(request.request_id)
            if decision is not None and not watch.lost:  # an unanswered request stays pending
                result = await self._resolve(request.request_id, decision)
        if result.status is TaskStatus.WAITING_APPROVAL:
            await lifecycle.release()
        return result

    async def _cancel_requested(self, task_id: str) -> str | None:
        """The reason of a cancel asked for ``task_id`` (``cancel_task``), if one was."""
        return (await self._task_store.cancel_requests([task_id])).get(task_id)

    async def _wait_for_human(
        self, lifecycle: TaskLifecycle, context: ExecutionContext, outcome: ExecutionOutcome
    ) -> TaskResult:
        """Ask the run's question durably: the task waits until ``resolve_approval``."""
        escalation: Escalation | None = outcome.escalation
        assert escalation is not None
        state = lifecycle.state
        request = ApprovalRequest(
            request_id=uuid.uuid4().hex,
            task_id=state.task_id,
            session_id=state.session_id,
            question=escalation.question,
            risk=RiskLevel.HIGH,
            reason=escalation.reason,
            created_at=now(),
        )
        result = await lifecycle.wait_for([request], context.run.stats, error=escalation.reason)
        with anyio.CancelScope(shield=True):
            await lifecycle.release()
        return result


def _run_error(exc: BaseException) -> RunError:
    """The run's failure for ``exc``, a ``BaseException`` that is no interruption."""
    error = RunError(f"the run raised {type(exc).__name__}" + (f": {exc}" if str(exc) else ""))
    error.__cause__ = exc
    return error


def _count_run(span: OpenSpan, before: TokenUsage, after: TokenUsage) -> None:
    """Put on ``span`` what this run used: ``after`` less the usage the task came with."""
    span.tokens_in = after.input_tokens - before.input_tokens
    span.tokens_out = after.output_tokens - before.output_tokens
    if after.cost_usd is not None:
        span.cost_usd = after.cost_usd - (before.cost_usd or 0.0)
    for name, count in usage_attributes(after).items():
        if used := count - (getattr(before, name) or 0):
            span.attributes[name] = used


async def _run_within_time(executor: IExecutor, context: ExecutionContext) -> ExecutionOutcome:
    """``executor.run``, stopped when the task's ``wall_time_s`` runs out.

    The clock stops while the run waits for a connected human's decision (and the deadline
    moves on by that long), so a slow answer does not spend the task's time.

    Raises:
        UsageLimitExceededError: The time ran out (the run was stopped at the limit).
    """
    limit = context.task.limits.wall_time_s
    if limit is None:
        return await executor.run(context)
    clock = anyio.CancelScope(deadline=anyio.current_time() + limit)
    ask = context.humans.request_approval
    if ask is not None:
        context.humans.request_approval = _PausingClock(clock, ask)
    try:
        with clock:
            return await executor.run(context)
    finally:
        context.humans.request_approval = ask
    # Only the clock's own cancellation ends up here; any other one propagates.
    raise UsageLimitExceededError(
        f"task usage limit wall_time_s ({limit:g} s): the run was still going after "
        f"{limit:g} s and was stopped",
        limit="wall_time_s",
        scope="task",
        used=limit,
        maximum=limit,
    )


class _PausingClock:
    """Asks a human with the run's deadline lifted; the time asking took is added back."""

    def __init__(self, clock: anyio.CancelScope, ask: ApprovalRequester) -> None:
        self._clock = clock
        self._ask = ask
        self._asking = 0
        self._left = 0.0

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        if self._asking == 0:
            self._left = self._clock.deadline - anyio.current_time()
            self._clock.deadline = math.inf
        self._asking += 1
        try:
            return await self._ask(request)
        finally:
            self._asking -= 1
            if self._asking == 0:
                self._clock.deadline = anyio.current_time() + self._left
