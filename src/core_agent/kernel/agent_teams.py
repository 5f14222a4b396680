"""Teams: one task handed to several member agents at once, then their answers combined.

A team runs as a kernel task of its own (strategy ``team``, run by ``TeamExecutor``) whose
members run as its child tasks (``nested_agents``), at most ``max_concurrent`` at once. A
member that fails (or is canceled, or is refused) does not fail the team: it is one result
among the others, with its error; so is a member whose run raises (a tool it names gone
since the team was checked, say): only an interruption (``is_interruption``: a cancel,
Ctrl-C) stops the team. ``AgentKernel.run_team`` refuses at once a team whose member names a
tool the kernel does not have. Then the aggregation step combines the results: a function,
or an agent (itself a child task, handed the task and every member's result). The team task
fails only when the aggregation does.

Each member's run is a ``step`` span of the team's trace (``member <name>``), and its child
task links back to it; members keep their slot's id, so a team resumed after a crash reuses
the members that had finished and resumes the others.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from core_agent.contracts.errors import (
    ApprovalPendingError,
    LeaseLostError,
    RunError,
    ToolError,
    UsageError,
    described,
    is_interruption,
)
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.contracts.trace_store import ITraceStore
from core_agent.kernel.nested_agents import Agent, NestedAgents, check_name, child_task_id
from core_agent.observability.tracer import Tracer
from shared.agent_protocol import (
    ParentTask,
    StrategyMode,
    TaskRequest,
    TaskResult,
    TaskStatus,
    UsageLimits,
)

TEAM_KEY = "team"
"""The request metadata key naming the team a ``team`` task runs."""


@dataclass(frozen=True, slots=True)
class MemberResult:
    """How one member of a team did: its answer, or why it has none."""

    agent: str
    task_id: str | None
    status: TaskStatus
    output: str | None = None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the member answered."""
        return self.status is TaskStatus.SUCCEEDED


Aggregate = Callable[[str, Sequence[MemberResult]], Awaitable[str] | str]
"""Combines the members' results (failures included) for the team's task into its answer."""


@dataclass(frozen=True)
class Team:
    """Member agents that all work on a task, and how their answers are combined.

    ``aggregate`` is a function (sync or async) of the task and the results, or an ``Agent``
    handed both as its task. A sync function runs in a worker thread (as a sync tool does),
    so one that blocks does not stall the event loop; a cancel of the team stops waiting
    for it. ``max_concurrent`` members run at once, never more. A member's
    ``timeout_s`` bounds its run: past it, its task is canceled and it is a result with
    that error (status ``canceled``).

    Raises:
        UsageError: A bad name, no members, two members of one name, or ``max_concurrent``
            below 1.
    """

    name: str
    description: str
    members: Sequence[Agent]
    aggregate: Aggregate | Agent
    max_concurrent: int = 2
    limits: UsageLimits | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name, "a team")
        if not self.members:
            raise UsageError(f"team {self.name!r} has no members")
        names = [member.name for member in self.members]
        if len(set(names)) != len(names):
            raise UsageError(f"team {self.name!r}: two members share a name ({names})")
        if self.max_concurrent < 1:
            raise UsageError(f"team {self.name!r}: max_concurrent must be at least 1")

    def request(self, task: str, *, parent: ParentTask | None = None) -> TaskRequest:
        """The request of the team's own task on ``task``."""
        mode: StrategyMode = "team"
        return TaskRequest(
            task=task,
            force_mode=mode,
            tools=(),
            limits=self.limits,
            metadata={**self.metadata, TEAM_KEY: self.name},
            parent=parent,
        )


def aggregation_task(task: str, results: Sequence[MemberResult]) -> str:
    """What an aggregating agent is handed: the task, then each member's answer or error."""
    parts = [f"Task given to the team: {task}", "", "Answers of its members:"]
    for result in results:
        if result.succeeded:
            parts.append(f"- {result.agent}: {result.output or '(empty answer)'}")
        else:
            parts.append(f"- {result.agent}: no answer ({result.status.value}: {result.error})")
    parts += ["", "Combine them into one answer to the task."]
    return "\n".join(parts)


class TeamExecutor(IExecutor):
    """Runs the ``team`` tasks of the teams the kernel knows (``teams``, by name)."""

    def __init__(
        self, teams: Mapping[str, Team], runs: NestedAgents, trace_store: ITraceStore
    ) -> None:
        self._teams = teams
        self._runs = runs
        self._trace_store = trace_store

    @property
    def strategy(self) -> StrategyMode:
        """``team``."""
        return "team"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Map the task over the members, then aggregate (see the module).

        Raises:
            RunError: The task names no team this kernel knows, or the aggregation failed.
        """
        request = context.task.request
        name = request.metadata.get(TEAM_KEY)
        team = self._teams.get(name) if isinstance(name, str) else None
        if team is None:
            known = ", ".join(sorted(self._teams)) or "none"
            raise RunError(
                f"the team strategy runs a team the kernel knows (metadata {TEAM_KEY!r}); "
                f"this task names {name!r} (known: {known}): add it with add_team"
            )
        results = await self._map(context, team, request.task)
        output = await self._aggregate(context, team, request.task, results)
        return ExecutionOutcome(output=output)

    async def _map(self, context: ExecutionContext, team: Team, task: str) -> list[MemberResult]:
        limiter = anyio.CapacityLimiter(team.max_concurrent)
        results: list[MemberResult | None] = [None] * len(team.members)
        tracer = Tracer.of(self._trace_store, context.task)

        async def run_member(slot: int, member: Agent) -> None:
            async with (
                limiter,
                tracer.span(
                    "step", f"member {member.name}", parent_span_id=context.task.parent_span_id
                ) as span,
            ):
                span.attributes["agent"] = member.name
                child: TaskResult | None = None
                try:
                    # A member that hangs past its timeout is stopped (its child task ends
                    # canceled) and reported, rather than holding the team forever.
                    with anyio.move_on_after(
                        member.timeout_s if member.timeout_s is not None else math.inf
                    ):
                        child = await self._runs.run(
                            context, member, task, key=f"member:{slot}", span_id=span.span_id
                        )
                except (LeaseLostError, ApprovalPendingError):
                    raise  # the team's own task's, not the member's
                except BaseException as exc:
                    # Refused before it ran (depth, limits, a tool gone since the team was
                    # started: an MCP server that did not come back after a restart), or
                    # its run broke: that member has no answer, the others still count.
                    if is_interruption(exc):
                        raise
                    error = str(exc) if isinstance(exc, ToolError) else described(exc)
                    results[slot] = MemberResult(member.name, None, TaskStatus.FAILED, error=error)
                    span.error = error
                    return
                if child is None:
                    error = f"{member.name} did not finish within {member.timeout_s:g} s"
                    stopped = child_task_id(context.task.task_id, f"member:{slot}")
                    results[slot] = MemberResult(
                        member.name, stopped, TaskStatus.CANCELED, error=error
                    )
                    span.error = error
                    return
                span.attributes["child_task_id"] = child.task_id
                span.attributes["status"] = child.status.value
                if child.status is not TaskStatus.SUCCEEDED:
                    span.error = child.error or child.status.value
                results[slot] = _member_result(member.name, child)

        async with anyio.create_task_group() as group:
            for slot, member in enumerate(team.members):
                group.start_soon(run_member, slot, member)
        # Every member is in the results: one that ended with none (its run swallowed by
        # the runtime) is reported failed, never left out of what is aggregated.
        return [
            result
            if result is not None
            else MemberResult(
                member.name,
                child_task_id(context.task.task_id, f"member:{slot}"),
                TaskStatus.FAILED,
                error=f"{member.name} ended without a result",
            )
            for slot, (member, result) in enumerate(zip(team.members, results, strict=True))
        ]

    async def _aggregate(
        self, context: ExecutionContext, team: Team, task: str, results: list[MemberResult]
    ) -> str:
        aggregate = team.aggregate
        if isinstance(aggregate, Agent):
            try:
                child = await self._runs.run(
                    context, aggregate, aggregation_task(task, results), key="aggregate"
                )
            except (LeaseLostError, ApprovalPendingError):
                raise
            except BaseException as exc:
                if is_interruption(exc):
                    raise
                error = str(exc) if isinstance(exc, ToolError) else described(exc)
                raise RunError(
                    f"team {team.name}: the aggregating agent {aggregate.name} could not run: "
                    f"{error}"
                ) from exc
            if child.status is not TaskStatus.SUCCEEDED:
                raise RunError(
                    f"team {team.name}: the aggregating agent {aggregate.name} ended "
                    f"{child.status.value}: {child.error}"
                )
            return child.output or ""

        def combine() -> object:
            try:
                return aggregate(task, results)
            except GeneratorExit as exc:
                # Handed to the awaiting task it would close every coroutine it awaits
                # through, past any handler.
                raise _RaisedInThread(exc) from exc

        try:
            if inspect.iscoroutinefunction(aggregate):
                combined: object = await aggregate(task, results)
            else:
                combined = await anyio.to_thread.run_sync(combine, abandon_on_cancel=True)
                if inspect.isawaitable(combined):
                    combined = await combined
        except BaseException as exc:
            # The host's function: its SystemExit (or any BaseException) fails the team's
            # task like any error of it; only an interruption goes on up (``is_interruption``).
            if is_interruption(exc):
                raise
            raised = exc.raised if isinstance(exc, _RaisedInThread) else exc
            raise RunError(
                f"team {team.name}: the aggregation failed: {described(raised)}"
            ) from raised
        if not isinstance(combined, str):
            raise RunError(
                f"team {team.name}: the aggregation returned {type(combined).__name__}, not text"
            )
        return combined


class _RaisedInThread(Exception):
    """What a sync aggregation raised in its worker thread that cannot be rethrown as is."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(str(raised))
        self.raised = raised


def _member_result(name: str, child: TaskResult) -> MemberResult:
    return MemberResult(
        agent=name,
        task_id=child.task_id,
        status=child.status,
        output=child.output,
        error=child.error if child.status is not TaskStatus.SUCCEEDED else None,
    )
