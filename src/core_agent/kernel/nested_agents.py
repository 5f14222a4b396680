"""Agents that run inside other agents' tasks: an agent called as a tool, a team's member.

An ``Agent`` is a task template (system prompt, tools, turns, limits) with a name and a
description. Exposed as a tool of another agent (``AgentKernel.agent_as_tool``), each call
runs it as a *child task*: a kernel task of its own (row, status, events, spans, ledger), whose
request names its parent (``TaskRequest.parent``: the parent task, the span of the call, its
depth). So everything a task has, a child has: approvals reach the same host, a cancel of the
parent reaches it, a crash is recovered from its own checkpoints.

How a child runs inside its parent (``NestedAgents.run``):

* depth: a call that would go deeper than ``AGENT_MAX_AGENT_DEPTH`` is refused with a tool
  error the model reads;
* the parent records an ``agent.handoff`` event, which commits with the child's creation,
  its start and its route, before the child's model is called (so it is durable and
  published before the child's first event), then the child runs with its writes apart from
  the parent's open unit of work (``independent_work``), so its events are published as they
  happen and a stream of the parent carries them in order (``TaskTree``), and neither task's
  records wait on, or fail with, the other's;
* its id follows from the parent's call (its idempotency key), so a parent resumed after a
  crash finds the child again: finished, its result is reused; left running, it is resumed;
  waiting for a human, the parent waits with it;
* it cannot take the parent past its usage limits: each token, cost and tool-call limit of
  the parent (and of the parent's session) bounds the child at what the parent has left when
  the call starts; while it runs, what it spends counts against the parent's limits (and
  every ancestor's) as it is spent, so children running at once share what the parent has
  left rather than each spending all of it, and a child stops at an ancestor's limit as a
  task stops at its own (``orchestration.usage_limits``); when the child ends (however:
  answered, failed, canceled by a timeout) its usage and tool calls are added to the
  parent's, once, as it stops counting live, so the parent's next step is held to them;
* taint goes both ways: a parent that holds untrusted content starts its child tainted (the
  sub-task was written under its influence, so the child's calls are graded as the parent's
  would be), and a child that read untrusted content taints its parent.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from pydantic import BaseModel

from core_agent.contracts.errors import (
    InvalidTransitionError,
    TaskNotFoundError,
    ToolArgumentsError,
    ToolExecutionError,
    UsageError,
)
from core_agent.contracts.event_bus import IEventBus
from core_agent.contracts.executor import ExecutionContext, RunState
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.tool import (
    TOOL_NAME_PATTERN,
    Capability,
    ITool,
    ToolAssessment,
    ToolContext,
    ToolSpec,
)
from core_agent.orchestration.usage_limits import live_tool_calls, live_usage
from shared.agent_protocol import (
    AgentHandoff,
    ParentTask,
    RiskLevel,
    StrategyMode,
    TaskQueued,
    TaskRequest,
    TaskResult,
    TaskState,
    TaskStatus,
    TokenUsage,
    UsageLimits,
)


@dataclass(frozen=True)
class Agent:
    """A named task template: what runs when another agent (or a team) hands it a sub-task.

    ``tools`` names the tools its tasks may use (all the kernel's when ``None``, agents
    included, down to the depth limit); the other fields are those of ``TaskRequest``.
    ``task_template`` phrases a sub-task handed to it (``{task}`` stands for the sub-task):
    "Check this for security holes: {task}" frames a team's shared task for one member.
    ``timeout_s`` bounds one call of it as a tool (none by default: its own ``limits`` and
    ``max_turns`` bound it).

    Raises:
        UsageError: The name is not a valid tool name, the description is empty, or the
            template lacks ``{task}``.
    """

    name: str
    description: str
    system_prompt: str | None = None
    tools: tuple[str, ...] | None = None
    max_turns: int | None = None
    limits: UsageLimits | None = None
    force_mode: StrategyMode | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    task_template: str = "{task}"
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "an agent")
        if not self.description.strip():
            raise UsageError(f"agent {self.name!r} needs a description (the model reads it)")
        if "{task}" not in self.task_template:
            raise UsageError(f"agent {self.name!r}: task_template must contain {{task}}")
        if self.tools is not None and isinstance(self.tools, str):
            raise UsageError(f"agent {self.name!r}: tools is a tuple of names, not a string")

    def request(self, task: str, *, parent: ParentTask | None = None) -> TaskRequest:
        """The request of a task of this agent working on ``task``."""
        return TaskRequest(
            task=self.task_template.replace("{task}", task),
            system_prompt=self.system_prompt,
            tools=self.tools,
            max_turns=self.max_turns,
            limits=self.limits,
            force_mode=self.force_mode,
            metadata=dict(self.metadata),
            parent=parent,
        )


def check_name(name: str, what: str) -> None:
    """Refuse a name the model could not call.

    Raises:
        UsageError: ``name`` is not 1-64 letters, digits, ``_`` or ``-``.
    """
    if not TOOL_NAME_PATTERN.match(name):
        raise UsageError(
            f"{what} named {name!r} cannot be called by a model: use 1-64 letters, digits, "
            "'_' or '-'"
        )


class Delegate(Protocol):
    """Something a task can hand a sub-task to: an ``Agent``, or a ``Team``."""

    @property
    def name(self) -> str:
        """The name the caller knows it by (its tool name)."""

    @property
    def description(self) -> str:
        """What it does, for the model that may call it."""

    def request(self, task: str, *, parent: ParentTask | None = None) -> TaskRequest:
        """The request of its task on ``task``."""


Execute = Callable[[TaskRequest, str], Awaitable[TaskResult]]
"""Creates and runs a task with the given id to its end (or until it waits for a human)."""
Resume = Callable[[str], Awaitable[TaskResult]]
"""Carries on a task left running by a dead process (``AgentKernel.resume``)."""
Cancel = Callable[[str, str], Awaitable[None]]
"""Cancels a task wherever it is (``AgentKernel.cancel_task``)."""


class NestedAgents:
    """The kernel's child tasks: runs them, finds them again, links them to their parents."""

    def __init__(
        self,
        *,
        task_store: ITaskStore,
        event_bus: IEventBus,
        execute: Execute,
        resume: Resume,
        cancel: Cancel,
        max_depth: int = 3,
        poll_s: float = 1.0,
        default_limits: UsageLimits | None = None,
        left_alone: Callable[[str], bool] = lambda task_id: False,
    ) -> None:
        self._task_store = task_store
        self._left_alone = left_alone
        """Whether a task's run is stopped only because the kernel closes (it is left for
        recovery): a child it waits for is left too, not canceled."""
        self._event_bus = event_bus
        self._execute = execute
        self._resume = resume
        self._cancel = cancel
        self.max_depth = max_depth
        self._poll_s = poll_s
        self.running: dict[str, ExecutionContext] = {}
        """The context of each task that runs in this kernel now, by task id (the kernel
        keeps it): how a call of an agent tool finds its parent's run."""
        self._children: dict[str, set[str]] = {}
        self._default_limits = default_limits or UsageLimits()
        self._awaited: set[str] = set()
        """Each child a run here waits for (its runs here are linked to the parent's)."""

    def started(self, context: ExecutionContext) -> None:
        """Note that ``context``'s task runs here now (see ``running``).

        A child task whose parent waits for it here is linked to the parent's run, so what
        it spends counts against the parent's limits as it is spent (until ``run`` adds its
        usage to the parent's at its end), in place of an earlier run of it.
        """
        task_id = context.task.task_id
        self.running[task_id] = context
        link = context.task.request.parent
        parent = self.running.get(link.task_id) if link is not None else None
        if parent is not None and task_id in self._awaited:
            _link(parent, context.run, task_id)

    def stopped(self, context: ExecutionContext) -> None:
        """Note that ``context``'s run here ended (see ``running``).

        A run that stopped for a human whose approver answered at once ends after the run
        that carried its task on (started within it): that one was the task's run here.
        """
        task_id = context.task.task_id
        if self.running.get(task_id) is context:
            del self.running[task_id]

    def parent_run(self, task_id: str, tool: str) -> ExecutionContext:
        """The run of ``task_id`` in this kernel, which calls ``tool``.

        Raises:
            ToolExecutionError: No run of it here (the tool was called outside a task).
        """
        context = self.running.get(task_id)
        if context is None:
            raise ToolExecutionError(
                f"{tool} runs an agent as a child task, so it can only be called from a task "
                "that runs in this kernel",
                tool_name=tool,
            )
        return context

    def descendants(self, task_id: str) -> Iterator[str]:
        """The child tasks running under ``task_id`` here, deepest first."""
        for child in list(self._children.get(task_id, ())):
            yield from self.descendants(child)
            yield child

    async def run(
        self,
        parent: ExecutionContext,
        delegate: Delegate,
        sub_task: str,
        *,
        key: str | None,
        span_id: str | None = None,
        call_id: str | None = None,
    ) -> TaskResult:
        """Run ``delegate`` on ``sub_task`` as a child task of ``parent``'s task, to its end.

        ``key`` names the call for good (the ledger's idempotency key, a team's member slot):
        the same key finds the same child again (see the module). Without one, every call
        starts a new child.

        Raises:
            ToolExecutionError: The child would be deeper than the depth limit, or its
                request names a session (nothing ran).
        """
        parent_task = parent.task.task_id
        link = parent.task.request.parent
        depth = (link.depth if link is not None else 0) + 1
        if depth > self.max_depth:
            raise ToolExecutionError(
                f"{delegate.name} would run at depth {depth}, deeper than nested agents may go "
                f"(AGENT_MAX_AGENT_DEPTH={self.max_depth}); do this part without it",
                tool_name=delegate.name,
            )
        child_id = child_task_id(parent_task, key)
        request = delegate.request(
            sub_task,
            parent=ParentTask(
                task_id=parent_task,
                depth=depth,
                agent=delegate.name,
                span_id=span_id or parent.task.parent_span_id,
                call_id=call_id,
                tainted=parent.run.tainted,
            ),
        )
        if request.session_id is not None:
            # Its parent's session holds the conversation, and the child's usage counts there
            # through its parent: in a session of its own it would count twice against that
            # session's limits (and its parent's own session is busy with the parent).
            raise ToolExecutionError(
                f"{delegate.name} names a session ({request.session_id}): a nested agent's "
                "task never joins a session; leave session_id unset",
                tool_name=delegate.name,
            )
        # A resumed parent's call finds the child it started: that one ran (or runs) under
        # the limits it was given then, and what it spent is owed to the parent whatever
        # the parent has left now; only a new child is bounded, or refused.
        if not (parent.run.resuming and key is not None and await self._exists(child_id)):
            limits = self._bounded_by(parent, request.limits, delegate.name)
            if limits is not request.limits:
                request = request.model_copy(update={"limits": limits})
        await parent.emit(
            AgentHandoff,
            agent=delegate.name,
            child_task_id=child_id,
            sub_task=sub_task,
            call_id=call_id,
        )
        children = self._children.setdefault(parent_task, set())
        children.add(child_id)
        self._awaited.add(child_id)
        carried = self.running.get(child_id)
        if carried is not None:  # carried on here already (recovery resumed it first)
            _link(parent, carried.run, child_id)
        result: TaskResult | None = None
        found: TaskState | None = None
        try:
            if parent.run.resuming and key is not None:
                # Durable and published before the child's first event, whose stream
                # follows it.
                await parent.flush()
                with self._task_store.independent_work():
                    result, found = await self._run_or_find(parent, request, child_id)
            else:
                # A fresh run's keys are new: its children are too. The child's creation and
                # start commit with the handoff (``AgentKernel._start_held``), so the handoff
                # is durable and published before the child's first event; its run commits
                # apart from the parent's step.
                result = await self._execute(request, child_id)
            if result.status is TaskStatus.WAITING_APPROVAL:
                # The child waits for a human (durably: nobody to ask now); so does the
                # parent, running, until whoever answers carries the child to its end.
                with self._task_store.independent_work():
                    result, found = await self._until_ended(parent, child_id)
        finally:
            children.discard(child_id)
            if not children:
                self._children.pop(parent_task, None)
            # Rolled up however the call ends: a child stopped by the call's timeout (or
            # its parent's cancel) has spent what it spent.
            self._awaited.discard(child_id)
            with anyio.CancelScope(shield=True):
                await self._roll_up(parent, child_id, delegate.name, call_id, result, found)
        return result

    async def _exists(self, task_id: str) -> bool:
        try:
            await self._task_store.get_task(task_id)
        except TaskNotFoundError:
            return False
        return True

    def _bounded_by(
        self, parent: ExecutionContext, own: UsageLimits | None, name: str
    ) -> UsageLimits | None:
        """The child's limits: its own, none looser than what its parent has left.

        ``own`` itself when the parent bounds nothing tighter (the kernel's defaults then
        complete it, as for any task).

        Raises:
            ToolExecutionError: A token or cost limit of the parent is spent already.
        """
        limits = (own or UsageLimits()).with_defaults(self._default_limits)
        # With what the parent's other children running now have spent so far.
        used = live_usage(parent.run)
        scopes = [("this task's", parent.task.limits, used)]
        if parent.task.session_limits.bounded:
            session = parent.task.session_usage + used
            scopes.append(("this task's session's", parent.task.session_limits, session))
        tighter: dict[str, float] = {}
        for whose, bounds, usage in scopes:
            for limit in _TOKEN_LIMITS:
                maximum = getattr(bounds, limit)
                if maximum is None:
                    continue
                left = maximum - _used(usage, limit)
                if left <= 0:
                    raise ToolExecutionError(
                        f"{name} cannot run: {whose} usage limit {limit} ({maximum:g}) is "
                        "spent, and a child task spends from it",
                        tool_name=name,
                    )
                mine = getattr(limits, limit)
                if mine is None or left < mine:
                    tighter[limit] = left
        if parent.task.limits.tool_calls is not None:
            # The call running the child holds one of the parent's places already.
            left = parent.task.limits.tool_calls - live_tool_calls(parent.run)
            left = max(left, 0)
            if limits.tool_calls is None or left < limits.tool_calls:
                tighter["tool_calls"] = left
        if not tighter:
            return own
        for limit in ("input_tokens", "output_tokens", "total_tokens"):
            if limit in tighter:
                tighter[limit] = max(int(tighter[limit]), 1)
        return limits.model_copy(update=tighter)

    async def _roll_up(
        self,
        parent: ExecutionContext,
        child_id: str,
        name: str,
        call_id: str | None,
        result: TaskResult | None,
        found: TaskState | None,
    ) -> None:
        """Add what the child used to its parent's run; pass its taint up.

        What the child's latest run here (or, run elsewhere, its stored state) counted live
        against the parent until now is what is added: its result's usage when it has one.
        """
        # In the same step as the usage is added: counted live until now, then in the
        # parent's stats, never both and never neither.
        ran = parent.run.child_runs.pop(child_id, None)
        stats = parent.run.stats
        if result is not None:
            stats.usage = stats.usage + result.usage
        elif ran is not None:  # stopped mid-run (a timeout, a cancel): what it spent so far
            stats.usage = stats.usage + ran.stats.usage
        if ran is not None:
            stats.tool_calls += ran.stats.tool_calls
        tainted = (ran is not None and ran.tainted) or (found is not None and found.tainted)
        if tainted and not parent.run.tainted:
            await parent.taint(
                name, call_id=call_id, reason="its child task read untrusted content"
            )

    async def _run_or_find(
        self, parent: ExecutionContext, request: TaskRequest, child_id: str
    ) -> tuple[TaskResult, TaskState | None]:
        """Start the child, or carry on the one an earlier run of the parent started.

        With the child's stored state when it was found rather than run here.
        """
        try:
            state = await self._task_store.get_task(child_id)
        except TaskNotFoundError:
            return await self._execute(request, child_id), None
        if state.status.is_terminal or state.status is TaskStatus.WAITING_APPROVAL:
            return result_of(state), state
        try:
            return await self._resume(child_id), None
        except UsageError:
            # It runs in a live process (recovery took it over first): wait for its end.
            return await self._until_ended(parent, child_id)

    async def _until_ended(
        self, parent: ExecutionContext, child_id: str
    ) -> tuple[TaskResult, TaskState]:
        """Wait for the child to end, wherever it is carried on; cancel it if we are.

        Meanwhile it counts against the parent's limits: its run here as it goes, else (it
        waits for a human, or another process carries it on) what it has stored, as read.
        """
        ended = anyio.Event()

        def watch(event: BaseModel) -> None:
            if (
                getattr(event, "task_id", None) == child_id
                and getattr(event, "kind", "") in _ENDINGS
            ):
                ended.set()

        subscription = self._event_bus.subscribe(None, watch)
        try:
            while True:
                state = await self._task_store.get_task(child_id)
                if state.status.is_terminal:
                    return result_of(state), state
                if child_id not in self.running:
                    _stand_in(parent, child_id, state)
                # The event wakes us at once in this process; the poll finds an ending
                # written by another one.
                with anyio.move_on_after(self._poll_s):
                    await ended.wait()
        except anyio.get_cancelled_exc_class():
            if self._left_alone(parent.task.task_id):
                raise  # both carried on by the next kernel's recovery
            with anyio.CancelScope(shield=True):
                # It may have ended meanwhile.
                with contextlib.suppress(InvalidTransitionError, UsageError):
                    await self._cancel(child_id, "its parent task was canceled")
            raise
        finally:
            subscription.cancel()


def _link(parent: ExecutionContext, run: RunState, child_id: str) -> None:
    """Count what ``run`` (of child ``child_id``) spends against ``parent``'s limits.

    Until it is rolled up, or another run of the child takes its place.
    """
    run.parent_run = parent
    parent.run.child_runs[child_id] = run


def _stand_in(parent: ExecutionContext, child_id: str, state: TaskState) -> None:
    """Count a child that does not run here at what it has stored (``state``).

    With the tool calls its latest run here made (the store does not count them).
    """
    earlier = parent.run.child_runs.get(child_id)
    run = RunState(messages=[], tainted=state.tainted)
    run.stats.usage = state.usage
    if earlier is not None:
        if _used(earlier.stats.usage, "total_tokens") > _used(state.usage, "total_tokens"):
            run.stats.usage = earlier.stats.usage  # never less than was counted already
        run.stats.tool_calls = earlier.stats.tool_calls
        run.tainted = run.tainted or earlier.tainted
    parent.run.child_runs[child_id] = run


_ENDINGS = frozenset({"task.succeeded", "task.failed", "task.canceled"})
_TOKEN_LIMITS = ("input_tokens", "output_tokens", "total_tokens", "cost_usd")


def _used(usage: TokenUsage, limit: str) -> float:
    if limit == "input_tokens":
        return usage.input_tokens
    if limit == "output_tokens":
        return usage.output_tokens
    if limit == "total_tokens":
        return usage.input_tokens + usage.output_tokens
    return usage.cost_usd or 0.0


def child_task_id(parent_task_id: str, key: str | None) -> str:
    """The id of the child task a call ``key`` of ``parent_task_id`` runs (random without)."""
    if key is None:
        return uuid.uuid4().hex
    return hashlib.sha256(f"{parent_task_id}\0{key}".encode()).hexdigest()[:32]


def result_of(state: TaskState) -> TaskResult:
    """A stored task as a result (for a child found again rather than run)."""
    return TaskResult(
        task_id=state.task_id,
        session_id=state.session_id,
        trace_id=state.trace_id,
        status=state.status,
        output=state.output,
        error=state.error,
        usage=state.usage,
    )


def delegation_outcome(name: str, result: TaskResult) -> str:
    """The child's answer, for the parent's model.

    Raises:
        ToolExecutionError: The child did not succeed (the reason, for the model).
    """
    if result.status is TaskStatus.SUCCEEDED:
        return result.output or ""
    raise ToolExecutionError(
        f"agent {name} ({result.task_id}) ended {result.status.value}: "
        f"{result.error or 'no reason given'}",
        tool_name=name,
    )


_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "description": "The sub-task, complete in itself: the agent sees nothing else of "
            "this conversation.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


class AgentTool(ITool):
    """An agent (or a team) as a tool: each call runs it as a child task (see the module).

    It declares what its agent's tools may do (so policy rules about capabilities match it),
    is not idempotent (each call is a new task, never answered from an earlier one's result),
    and is resumable (a call cut by a crash carries on its child task). It grades its own call
    low: every call its agent makes is graded, and approved, on its own.
    """

    def __init__(
        self,
        delegate: Delegate,
        runs: NestedAgents,
        *,
        capabilities: frozenset[Capability],
        timeout_s: float | None = None,
    ) -> None:
        check_name(delegate.name, "an agent tool")
        self.delegate = delegate
        self._runs = runs
        self._spec = ToolSpec(
            name=delegate.name,
            description=delegate.description,
            parameters=_PARAMETERS,
            capabilities=capabilities,
            idempotent=False,
            timeout_s=timeout_s if timeout_s is not None else math.inf,
            resumable=True,
        )

    @property
    def spec(self) -> ToolSpec:
        """See ``ITool.spec``."""
        return self._spec

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """A non-empty ``task`` string, nothing else (see ``ITool.validate_arguments``)."""
        task = arguments.get("task")
        extra = sorted(set(arguments) - {"task"})
        if not isinstance(task, str) or not task.strip():
            raise ToolArgumentsError(
                f"invalid arguments for tool {self._spec.name!r}: task: give the sub-task as "
                "a non-empty string",
                tool_name=self._spec.name,
            )
        if extra:
            raise ToolArgumentsError(
                f"invalid arguments for tool {self._spec.name!r}: unexpected {', '.join(extra)}"
                " (it takes only task)",
                tool_name=self._spec.name,
            )
        return {"task": task}

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Low: the agent's own calls are graded one by one (see the class)."""
        return ToolAssessment(risk=RiskLevel.LOW, details={"agent": self._spec.name})

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run the agent on ``task`` as a child task of the caller's; its answer."""
        parent = self._runs.parent_run(context.task_id, self._spec.name)
        result = await self._runs.run(
            parent,
            self.delegate,
            str(arguments["task"]),
            key=context.idempotency_key,
            span_id=context.span_id,
            call_id=context.call_id,
        )
        return delegation_outcome(self._spec.name, result)


class TaskTree:
    """The tasks one stream follows: its own, and the nested agents' tasks started under it.

    A child is recognised by its first event (``task.queued``, whose request names its
    parent); its events are forwarded with their depth below the streamed task.
    """

    def __init__(self, root: str) -> None:
        self._depths = {root: 0}

    def admit(self, event: BaseModel) -> BaseModel | None:
        """``event`` as the stream gives it (with its depth), or ``None`` if not ours."""
        task_id = getattr(event, "task_id", None)
        if not isinstance(task_id, str):
            return None
        depth = self._depths.get(task_id)
        if depth is None:
            if not isinstance(event, TaskQueued) or event.request.parent is None:
                return None
            above = self._depths.get(event.request.parent.task_id)
            if above is None:
                return None
            depth = self._depths[task_id] = above + 1
        return event if depth == 0 else event.model_copy(update={"depth": depth})
