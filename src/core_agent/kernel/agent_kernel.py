"""The public facade: run tasks, stream their events, inspect tasks and traces.

It also answers the questions a task asks a human (``resolve_approval``), carries on tasks
whose process died (``resume``, ``recover``) and cancels tasks wherever they run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, overload

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import BaseModel

from core_agent.contracts.approval_gateway import ApprovalCallback, IApprovalGateway
from core_agent.contracts.business_capability_provider import IBusinessCapabilityProvider
from core_agent.contracts.errors import (
    ConfigurationError,
    CoreAgentError,
    DefinitionNotLoadedError,
    InvalidTransitionError,
    SessionBusyError,
    SessionNotFoundError,
    StorageError,
    TaskFailedError,
    TaskNotFoundError,
    UsageError,
    is_interruption,
)
from core_agent.contracts.event_bus import IEventBus
from core_agent.contracts.executor import (
    ExecutionContext,
    HumanChannel,
    IExecutor,
    RunState,
    RunStats,
    TaskIdentity,
)
from core_agent.contracts.memory_store import IMemoryStore
from core_agent.contracts.metrics import AgentMetrics, MetricsScope
from core_agent.contracts.session_store import DeletedSession, ISessionStore
from core_agent.contracts.strategy_router import IStrategyRouter, RoutingDecision
from core_agent.contracts.task_store import ApprovalDecided, ITaskStore, TaskPage
from core_agent.contracts.tool import Capability
from core_agent.contracts.tool_hook import ToolHook
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.contracts.tool_sandbox import IToolSandbox
from core_agent.contracts.trace_store import ITraceStore, Span
from core_agent.contracts.untrusted import UNTRUSTED_NOTICE
from core_agent.kernel.agent_teams import Team, TeamExecutor
from core_agent.kernel.business_capabilities import BusinessCapabilities
from core_agent.kernel.human_approvals import (
    HumanApprovals,
    already_decided,
    open_requests,
    recorded_decisions,
)
from core_agent.kernel.nested_agents import Agent, AgentTool, Delegate, NestedAgents, TaskTree
from core_agent.kernel.response_models import model_name, model_schema, response_model_for
from core_agent.kernel.session_controls import retry_request, turn_entries
from core_agent.kernel.session_conversations import SessionConversations
from core_agent.kernel.state_machine import check_transition
from core_agent.kernel.task_driver import TaskDriver
from core_agent.kernel.task_events import TaskEventLog, now
from core_agent.kernel.task_lease import lease_until, new_owner
from core_agent.kernel.task_lifecycle import TaskLifecycle, task_span
from core_agent.kernel.task_recovery import TaskRecovery, unfinished_tools
from core_agent.kernel.task_references import find_task_id
from core_agent.memory.hybrid_memory import recall_message
from core_agent.memory.ingestion import IngestionPipeline, IngestProgress, IngestResult
from core_agent.observability.metrics import collect_metrics
from core_agent.observability.span_content import route_features
from core_agent.observability.tracer import Tracer, new_trace_id
from core_agent.prompts import PromptSet, default_prompts
from core_agent.safety.approval_gateway import CallbackApprovalGateway
from shared.agent_protocol import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    SessionInfo,
    SessionSummary,
    SessionTranscript,
    StrategySelected,
    SystemMessage,
    TaskCanceled,
    TaskEvent,
    TaskQueued,
    TaskRequest,
    TaskResult,
    TaskResumed,
    TaskState,
    TaskStatus,
    TokenUsage,
    UsageLimits,
    UserMessage,
)

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


class Closable(Protocol):
    """Something the kernel releases when it closes (a store)."""

    async def close(self) -> None:
        """Release resources."""


class AgentKernel:
    """Routes each task to a strategy and runs it, keeping state, events and spans durable.

    Use as an async context manager (or call ``aclose``) so stores are closed.
    Each task's system prompt is its request's ``system_prompt``, else the ``system`` prompt of
    ``prompts`` (the shipped set when ``None``).
    ``long_term_memory`` builds the store whose ``recall_k`` items most relevant to a new task
    are put after its system prompt; it is called on the first task, not before.
    ``sandbox`` is the default sandbox: each task records its settings (with the request's own
    workspace roots, if any) and runs under them, also when another process resumes it.
    ``sessions`` makes sessions conversations: a task starts from its session's history and
    adds its turn when it ends (``session_conversations``); without it a session only groups
    tasks, and the session methods raise ``UsageError``.
    ``limits`` are every task's default usage limits (a request's own ``limits`` win, one by
    one); ``session_limits`` bound the tasks of one session together. ``tool_hooks`` run
    around every tool call (see ``add_tool_hook``). ``capabilities`` are the enabled business
    capabilities: their instructions follow every system prompt, and each task starts with
    their context (``business_capabilities``); they are closed with the kernel.
    ``ingestion`` builds the knowledge base's pipeline (on the first ``ingest``), which
    writes into ``knowledge_namespace`` unless told otherwise.
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
        prompts: PromptSet | None = None,
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
        sessions: SessionConversations | None = None,
        limits: UsageLimits | None = None,
        session_limits: UsageLimits | None = None,
        tool_hooks: Sequence[ToolHook] = (),
        warm_up: Callable[[], None] | None = None,
        connections: Callable[[], AbstractAsyncContextManager[None]] | None = None,
        capabilities: Sequence[IBusinessCapabilityProvider] = (),
        ingestion: Callable[[], IngestionPipeline] | None = None,
        knowledge_namespace: str = "default",
        max_agent_depth: int = 3,
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
        self._system_prompt = (prompts if prompts is not None else default_prompts()).render(
            "system"
        )
        self._closables = closables
        self._approval_gateway = approval_gateway
        self._approval_timeout_s = approval_timeout_s
        self._long_term_memory = long_term_memory
        self._memory_namespace = memory_namespace
        self._recall_k = recall_k
        self._sandbox = sandbox
        self._lease_s = lease_s
        self._sessions = sessions
        self._limits = limits or UsageLimits()
        self._session_limits = session_limits or UsageLimits()
        self._tool_hooks: list[ToolHook] = list(tool_hooks)
        self._warm_up = warm_up
        self._connections = connections
        self._connections_kept: AbstractAsyncContextManager[None] | None = None
        """Loads the model's libraries (``ILLMGateway.warm_up``); started by the first run."""
        self._capabilities = BusinessCapabilities(capabilities)
        self._tools_listed = False
        """Whether the tools were listed once (tools found by asking servers, MCP, join then)."""
        self._ingestion = ingestion
        self._knowledge_namespace = knowledge_namespace
        if recovery not in ("resume", "fail", "off"):
            raise ConfigurationError(f"recovery must be resume, fail or off, not {recovery!r}")
        self._recovery_mode = recovery
        self._response_models: dict[str, type[BaseModel]] = {}
        """The response model of each task this kernel ran that has not ended (see
        ``response_models``): a waiting task resolved here answers with it."""
        self.owner = owner or new_owner()
        """This kernel's name on the tasks it runs (see ``TaskState.owner``)."""
        self._driver = TaskDriver(
            task_store=task_store,
            trace_store=trace_store,
            owner=self.owner,
            lease_s=lease_s,
            cancel_check_s=cancel_check_s,
            ask_human=self._ask_host,
            has_approver=lambda: self._approval_gateway is not None,
            resolve=self.resolve_approval,
            carried_usage=self._carried_usage if sessions is not None else None,
        )
        self._nested = NestedAgents(
            task_store=task_store,
            event_bus=event_bus,
            execute=lambda request, task_id: self._execute(request, task_id, None),
            resume=self.resume,
            cancel=self.cancel_task,
            max_depth=max_agent_depth,
            poll_s=cancel_check_s,
            default_limits=self._limits,
            left_alone=lambda task_id: self._driver.left_alone(task_id),
        )
        self._teams: dict[str, Team] = {}
        self._executors.setdefault("team", TeamExecutor(self._teams, self._nested, trace_store))
        self._recovery = TaskRecovery(
            task_store=task_store,
            event_bus=event_bus,
            driver=self._driver,
            owner=self.owner,
            lease_s=lease_s,
            resume=self.resume,
            trace_store=trace_store,
            ended_unrun=self._record_ended_unrun,
        )
        self._background: anyio.abc.TaskGroup | None = None
        self._background_host: int | None = None
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

    def add_tool_hook(self, hook: ToolHook) -> None:
        """Run ``hook`` around every tool call of the runs that start from now on.

        Hooks run in the order added, after a call's arguments are validated and before the
        policy grades it: they may block it, rewrite its arguments (validated and graded
        again) and observe its result (``contracts.tool_hook``).
        """
        self._tool_hooks.append(hook)

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
        if self._connections is not None and self._connections_kept is None:
            # The model's connections are kept while the kernel is entered (a TLS handshake
            # per call otherwise), and closed with it.
            kept = self._connections()
            await kept.__aenter__()
            self._connections_kept = kept
        if self._recovery_mode != "off" and self._background is None:
            # Also where streamed runs live (``stream_task``), so a consumer that stops
            # iterating without closing the stream does not tear a task group of its own.
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
        except Exception:
            # Background work must not break the host's ``async with kernel`` block.
            log.exception("recovering tasks failed")
        finally:
            done.set()

    async def _stop_background(self) -> None:
        background, self._background = self._background, None
        if background is None:
            return
        # Tasks it was recovering are left to be recovered again, not ended as canceled.
        self._driver.closing = True
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

    def warm_up_model(self) -> None:
        """Start loading the model's libraries in a background thread (once; returns at once).

        litellm takes seconds to import. The kernel calls this when its first task starts,
        so the import overlaps routing, recall and the stores' writes; a host that knows a
        task is coming (a chat waiting for its first message) may call it earlier.
        Not a daemon thread: one frozen at exit while holding an import lock would hang the
        interpreter's own shutdown (a vendor finaliser imports a module then).
        """
        if self._warm_up is not None:
            warm_up, self._warm_up = self._warm_up, None
            threading.Thread(target=warm_up, name="core-agent-model-warm-up").start()

    def leave_runs(self) -> None:
        """From now on, leave the runs that are cancelled for recovery instead of canceling them.

        For a host that shuts down with tasks in flight: call this, then cancel the runs
        (their callers). Each such task keeps its status and last checkpoint, gives up its
        lease, and is carried on by the next kernel's recovery (or ``resume``). A
        ``cancel_task`` still ends a task ``canceled``.
        """
        self._driver.leaving = True

    async def aclose(self) -> None:
        """Stop recovery; close the model's kept connections, the stores, the sandbox."""
        await self._stop_background()
        kept, self._connections_kept = self._connections_kept, None
        if kept is not None:
            await kept.__aexit__(None, None, None)
        await self._task_store.close()
        await self._trace_store.close()
        for closable in self._closables:
            await closable.close()
        await self._capabilities.close()
        if self._sandbox is not None:
            await self._sandbox.close()

    def executor(self, strategy: str) -> IExecutor | None:
        """The executor this kernel runs ``strategy`` with, if it has one."""
        return self._executors.get(strategy)

    async def route(self, request: TaskRequest) -> RoutingDecision:
        """The strategy the kernel would use for ``request``, without running it."""
        await self._list_tools_once()
        return await self._router.route(request, self._specs(request))

    async def _list_tools_once(self) -> None:
        """List the tools the first time off the event loop: MCP servers start then."""
        if not self._tools_listed:
            await anyio.to_thread.run_sync(self._tools.names)
            self._tools_listed = True

    @overload
    async def execute_task(
        self, request: TaskRequest, *, task_id: str | None = None
    ) -> TaskResult: ...

    @overload
    async def execute_task(
        self, request: TaskRequest, *, response_model: type[M], task_id: str | None = None
    ) -> M: ...

    async def execute_task(
        self,
        request: TaskRequest,
        *,
        response_model: type[M] | None = None,
        task_id: str | None = None,
    ) -> TaskResult | M:
        """Run ``request`` to the end.

        Without ``response_model``: the task's result, whatever its status (a run failure is
        a ``failed`` result with the reason; a question for a human is ``waiting_approval``).

        With ``response_model``: the validated answer. The model's JSON is extracted, repaired
        and validated, with one self-correction round; if the task does not succeed,
        ``TaskFailedError`` carries its result (for an invalid answer, with the raw text and
        the validation error).

        Misuse (e.g. forcing a strategy that is not installed) raises ``UsageError`` before a
        task is created; so does a session that is closed (``SessionClosedError``) or has a
        task that has not ended (``SessionBusyError``): a session runs one task at a time,
        and a concurrent submission fails at once rather than wait.

        ``task_id`` names the new task, for a host that must know it before the first event
        (a new random id when not given); an id the store already holds is refused
        (``StorageError``, nothing written).
        """
        result = await self._execute(request, task_id or uuid.uuid4().hex, response_model)
        if response_model is None:
            return result
        if result.status is not TaskStatus.SUCCEEDED or result.structured_output is None:
            raise TaskFailedError(
                result, f"task {result.task_id} ended {result.status.value}: {result.error}"
            )
        return response_model.model_validate(result.structured_output)

    @property
    def nested_agents(self) -> NestedAgents:
        """The kernel's child tasks: how an executor (a workflow's) runs tasks under its own."""
        return self._nested

    def stream_task(
        self, request: TaskRequest, *, task_id: str | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run ``request`` and yield its events as they happen, ending with the final one.

        Leaving the loop early cancels the task (it ends ``canceled``). In a kernel entered
        with ``async with kernel:`` (with background recovery on, the default) a plain
        ``break`` is enough: the run lives in the kernel's task group. Otherwise wrap the
        iterator in ``contextlib.aclosing`` so it closes in your task.
        ``task_id`` names the new task, as in ``execute_task``.
        """
        task_id = task_id or uuid.uuid4().hex
        return self._stream(task_id, lambda: self._execute(request, task_id, None))

    def agent_as_tool(self, agent: Delegate, *, timeout_s: float | None = None) -> AgentTool:
        """Let tasks call ``agent`` (an ``Agent`` or a ``Team``) as a tool, by its name.

        Each call runs it as a child task of the calling task (``nested_agents``): one level
        deeper, down to ``AGENT_MAX_AGENT_DEPTH``. The tool declares the capabilities of the
        agent's tools (a team's: its members'), all the kernel's when it names none.
        Returns the tool, now registered.

        Raises:
            UsageError: The agent names a tool this kernel does not have.
            ToolRegistrationError: A tool of that name is already registered.
        """
        if isinstance(agent, Team):
            self.add_team(agent)
        tool = AgentTool(
            agent,
            self._nested,
            capabilities=self._capabilities_of(agent),
            timeout_s=timeout_s if timeout_s is not None else getattr(agent, "timeout_s", None),
        )
        self._tools.register(tool)
        return tool

    def _capabilities_of(self, agent: Delegate) -> frozenset[Capability]:
        """What the tools ``agent`` may use may do (its members' tools, for a team)."""
        agents: list[Agent] = []
        if isinstance(agent, Team):
            agents = list(agent.members)
            if isinstance(agent.aggregate, Agent):
                agents.append(agent.aggregate)
        elif isinstance(agent, Agent):
            agents = [agent]
        found: set[Capability] = set()
        of = f" of team {agent.name!r}" if isinstance(agent, Team) else ""
        hint = " (an MCP server's tools are missing when it could not start: see its warning)"
        for one in agents:
            names = self._tools.names() if one.tools is None else one.tools
            unknown = sorted(set(names) - set(self._tools.names()))
            if unknown:
                raise UsageError(
                    f"agent {one.name!r}{of} names tools this kernel does not have: "
                    f"{', '.join(unknown)}{hint if any('__' in n for n in unknown) else ''}"
                )
            for name in names:
                found |= self._tools.get(name).spec.capabilities
        return frozenset(found)

    def add_team(self, team: Team) -> None:
        """Know ``team`` by its name: its ``team`` tasks run here (also when resumed).

        Add teams (and agent tools, ``agent_as_tool``) before entering the kernel: the
        recovery it starts then carries on their tasks left by a dead process (a ``team``
        task whose team is unknown fails with the reason).

        Raises:
            UsageError: Another team of that name is known.
        """
        known = self._teams.get(team.name)
        if known is not None and known is not team:
            raise UsageError(f"a team named {team.name!r} is already known to this kernel")
        self._teams[team.name] = team

    async def run_agent(self, agent: Agent, task: str, *, task_id: str | None = None) -> TaskResult:
        """Run ``agent`` on ``task`` as a top-level task (``execute_task`` of its request)."""
        return await self.execute_task(agent.request(task), task_id=task_id)

    async def run_team(self, team: Team, task: str, *, task_id: str | None = None) -> TaskResult:
        """Run ``team`` on ``task`` as a task whose members are its child tasks.

        The result is the aggregation's answer; members that failed are part of what was
        aggregated, not a failure of the team (``agent_teams``).

        Raises:
            UsageError: A member (or the aggregating agent) names a tool this kernel does
                not have, or another team of that name is known (nothing ran).
        """
        # Seen before anything runs, so refused as agent_as_tool refuses it, rather than
        # found by the member's run after its teammates have started.
        await self._list_tools_once()
        self._capabilities_of(team)
        self.add_team(team)
        return await self.execute_task(team.request(task), task_id=task_id)

    def supervisor(self, agent: Agent, specialists: Sequence[Delegate]) -> Agent:
        """``agent``, able to hand sub-tasks to ``specialists`` and combine their answers.

        Each specialist becomes a tool (``agent_as_tool``, unless it is one already); the
        returned agent may call them besides its own tools, and its system prompt lists them.
        Each handoff is recorded: an ``agent.handoff`` event in the supervisor's task, the
        specialist's child task linked to the call's span.

        Raises:
            UsageError: No specialists, or one names a tool this kernel does not have, or a
                specialist's name is taken by another tool (a built-in one, or another agent
                of that name): its calls would go there while the prompt describes it.
        """
        if not specialists:
            raise UsageError(f"supervisor {agent.name!r} needs at least one specialist")
        registered = set(self._tools.names())
        for specialist in specialists:
            if specialist.name not in registered:
                self.agent_as_tool(specialist)
                continue
            taken = self._tools.get(specialist.name)
            if getattr(taken, "delegate", None) is not specialist:
                raise UsageError(
                    f"specialist {specialist.name!r} of supervisor {agent.name!r}: a tool of "
                    "that name is already registered and is not this agent (rename the "
                    "specialist)"
                )
        roster = "\n".join(f"- {s.name}: {s.description}" for s in specialists)
        prompt = agent.system_prompt or self._system_prompt
        names = tuple(s.name for s in specialists)
        tools = None if agent.tools is None else tuple(dict.fromkeys(agent.tools + names))
        return dataclasses.replace(
            agent,
            system_prompt=(
                f"{prompt}\n\nYou supervise specialists. Hand each sub-task to the one it "
                "suits by calling it with the sub-task, complete in itself; then combine "
                f"their answers into yours.\nSpecialists:\n{roster}"
            ),
            tools=tools,
        )

    async def resolve_approval(
        self,
        request_id: str,
        decision: ApprovalDecision,
        *,
        response_model: type[BaseModel] | None = None,
    ) -> TaskResult:
        """Answer a task's pending question and, if approved, resume it to the end.

        Works after a restart and from any process: the request is a row in the task store,
        and a request is decided once (a second decision is refused). For a tool call, the
        task resumes once every request of its turn has a decision (a denial is shown to the
        model); for a question, an approval resumes the task with the decision's ``reason``
        as guidance and a denial fails it.

        A task started with a ``response_model`` answers with it again: its
        ``structured_output`` is validated against it. Pass the class again here unless this
        process started the task or has imported the module defining it (``response_models``).

        Raises:
            UsageError: No task is waiting on ``request_id`` (unknown, or already decided),
                or ``decision.request_id`` names another request, or the call's tool is not
                in this kernel (one another process passed in code; nothing is recorded).
            ResponseModelError: The task's response model is not known here, or
                ``response_model`` has another JSON Schema (nothing is recorded).
            TaskHeldError: The task's live host is asking its own approver about it.
        """
        if decision.request_id != request_id:
            raise UsageError(
                f"the decision is for request {decision.request_id!r}, not {request_id!r}"
            )
        state, request = await self._pending_request(request_id)
        # Checked before the decision is recorded: a run that cannot answer in the right form
        # must not be started (nor the decision spent).
        output_type = self._response_model_for(state, response_model)
        await self._list_tools_once()
        if request.tool_call is not None and request.tool_call.name not in self._tools.names():
            raise UsageError(
                f"the call waits on tool {request.tool_call.name!r}, which this process does "
                "not have (a tool the application passed to create_kernel?): resolve it from "
                "a kernel that has the tool; the request still waits"
            )
        if request.tool_call is not None:
            return await self._resume_tool_call(state, request, decision, output_type)
        lifecycle = self._lifecycle(
            state, TaskEventLog(self._task_store, self._event_bus, state.task_id)
        )
        if not decision.approved:
            return await self._deny_question(lifecycle, request, decision, output_type)
        await self._decide(lifecycle, decision, then=TaskStatus.RUNNING)
        async with self._until_driven(lifecycle):
            await self._trace_decision(state, request, decision)
            return await self._after_answer(lifecycle, request, decision, output_type)

    async def _deny_question(
        self,
        lifecycle: TaskLifecycle,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        output_type: type[BaseModel] | None,
    ) -> TaskResult:
        """Fail the task whose question a human answered no.

        The decision, the task's move to ``failed`` with its event, the decision's span, the
        root span and the session's turn are one transaction: a crash cannot leave the task
        failed without the rest.
        """
        state = lifecycle.state
        error = f"a human declined to continue: {decision.reason or 'no reason given'}"
        context = self._context(lifecycle, output_type)
        stats = context.run.stats
        stats.usage = state.usage
        denied = lifecycle.result(
            TaskStatus.FAILED, stats, error=error, error_type="ApprovalDenied"
        )

        async def follow() -> None:
            await self._trace_decision(state, request, decision)
            if self._sessions is not None:
                await self._sessions.record(state, context, denied)

        await self._decide(lifecycle, decision, then=TaskStatus.FAILED, error=error, follow=follow)
        self._response_models.pop(state.task_id, None)
        return denied

    async def _after_answer(
        self,
        lifecycle: TaskLifecycle,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        output_type: type[BaseModel] | None,
    ) -> TaskResult:
        """Carry on a task whose question a human answered yes, with their guidance."""
        state = lifecycle.state
        context = self._context(lifecycle, output_type)
        context.run.stats.usage = state.usage
        context.run.guidance = (
            f"A human reviewed earlier failures of this task.\n{request.question}\n"
            f"Their guidance: {decision.reason or '(none: retry as you see fit)'}"
        )
        context.run.resuming = True
        await lifecycle.events(TaskResumed, reason="a human answered", owner=self.owner)
        return await self._drive(lifecycle, self._executor_of(state), context)

    @asynccontextmanager
    async def _until_driven(self, lifecycle: TaskLifecycle) -> AsyncIterator[None]:
        """Guard the steps between taking a task (it is ours, queued or running) and its run.

        Nothing drives the task yet: if those steps fail or the caller is cancelled, the task
        ends (``canceled`` by an interruption, ``failed`` with any other error, a
        ``SystemExit`` included) instead of staying ``running`` with
        nobody to carry it on, or being carried on later by recovery against the caller's
        will. Once the driver runs it, the driver records how it ends.
        """
        try:
            yield
        except BaseException as exc:
            # Judged before the shield, under which every cancel looks withdrawn.
            interrupted = is_interruption(exc)
            with anyio.CancelScope(shield=True):
                try:
                    # A nested agent's creation may still be held in its parent's step (its
                    # start failed): stored now, so it ends here rather than being left
                    # queued for recovery to run.
                    await self._task_store.flush()
                    stored = await self._task_store.get_task(lifecycle.task_id)
                    if (
                        stored.status in (TaskStatus.QUEUED, TaskStatus.RUNNING)
                        and stored.owner == self.owner
                        and not self._driver.runs(lifecycle.task_id)
                    ):
                        stats = RunStats(usage=stored.usage)
                        if not interrupted:
                            # A SystemExit or other BaseException is a failure like any
                            # error: nobody canceled the task.
                            await lifecycle.fail(
                                str(exc) or type(exc).__name__,
                                type(exc).__name__,
                                stats,
                                current=stored.status,
                            )
                        elif self._driver.leaving:
                            await lifecycle.release()
                        else:  # canceled, or Ctrl-C: the host stopped the caller
                            await lifecycle.cancel(
                                "the caller was canceled", stats, current=stored.status
                            )
                except Exception:
                    log.exception("task %s could not be ended", lifecycle.task_id)
            raise

    async def _decide(
        self,
        lifecycle: TaskLifecycle,
        decision: ApprovalDecision,
        *,
        then: TaskStatus,
        error: str | None = None,
        follow: Callable[[], Awaitable[None]] | None = None,
    ) -> ApprovalDecided:
        """Record ``decision`` once (see ``TaskLifecycle.decide``).

        Raises:
            UsageError: The request was decided meanwhile, or the task left
                ``waiting_approval``.
            TaskHeldError: The task's live host is asking its own approver about it.
        """
        check_transition(lifecycle.task_id, TaskStatus.WAITING_APPROVAL, then)
        try:
            decided = await lifecycle.decide(decision, then=then, error=error, follow=follow)
        except InvalidTransitionError as exc:
            raise UsageError(
                f"task {lifecycle.task_id} no longer waits for a decision ({exc.current})"
            ) from exc
        if decided is None:
            record = await self._task_store.approval(decision.request_id)
            raise already_decided(decision.request_id, record.decision if record else None)
        return decided

    async def resume(
        self,
        task_id: str,
        *,
        response_model: type[BaseModel] | None = None,
        reason: str = "taken over after its process stopped",
    ) -> TaskResult:
        """Carry on a task whose process died, from its last checkpoint, to the end.

        The kernel takes the task's lease (so no other process runs it too), and the run goes
        on from the last step its executor saved: a finished tool call is not run again, one
        that was interrupted runs again only when that is harmless, else a human is asked. A
        task that was queued and never started starts now. A task started with a response
        model answers with it (see ``resolve_approval`` for when to pass it again).
        ``reason`` is what its ``task.resumed`` event says.

        Raises:
            TaskNotFoundError: No such task.
            UsageError: It runs in a live process, this one included (its lease holds), it
                waits for a human (use ``resolve_approval``), or it already ended.
            ResponseModelError: Its response model is not known here, or ``response_model``
                has another JSON Schema.
            DefinitionNotLoadedError: It runs a definition (a workflow) this process lacks,
                or it was running a tool this process lacks when its process stopped.
        """
        if not self._driver.claim(task_id):
            raise UsageError(f"task {task_id} already runs in this kernel")
        try:
            return await self._resume_claimed(task_id, response_model, reason)
        finally:
            # A claim that did not lead to a run (refused, or failed before it) is dropped.
            self._driver.unclaim(task_id)

    async def _resume_claimed(
        self, task_id: str, response_model: type[BaseModel] | None, reason: str
    ) -> TaskResult:
        state = await self._recovery.free_if_owner_died(await self._task_store.get_task(task_id))
        if state.status is TaskStatus.WAITING_APPROVAL:
            raise UsageError(
                f"task {task_id} waits for a human's decision: answer it (resolve_approval, "
                "core-agent resolve, or the trace viewer)"
            )
        if state.status not in (TaskStatus.RUNNING, TaskStatus.QUEUED):
            raise UsageError(f"task {task_id} already ended ({state.status.value})")
        # Before the lease is taken: a task this kernel cannot finish is left to one that can.
        output_type = self._response_model_for(state, response_model)
        self._executor_of(state).check_resumable(state.request)
        held_here = (
            state.owner == self.owner
            and state.lease_expires_at is not None
            and state.lease_expires_at > now()
        )
        if held_here or not await self._task_store.acquire_lease(
            task_id, owner=self.owner, until=lease_until(self._lease_s)
        ):
            raise UsageError(
                f"task {task_id} runs in a live process ({state.owner}, lease until "
                f"{state.lease_expires_at:%H:%M:%S} UTC): cancel it there, or wait for it"
            )
        try:
            state = await self._task_store.get_task(task_id)
            persisted = await self._task_store.list_events(task_id)
            await self._list_tools_once()
            missing = unfinished_tools(persisted) - set(self._tools.names())
            if missing:
                raise DefinitionNotLoadedError(
                    f"task {task_id} was running {', '.join(sorted(missing))} when its process "
                    "stopped, a tool this process does not have (one the application passed to "
                    "create_kernel?): resume it from a kernel that has it; it is left as it is"
                )
        except BaseException:
            # Not taken after all (its log cannot be read, it needs a tool this process
            # lacks, or the caller left): free again.
            with anyio.CancelScope(shield=True):
                await self._task_store.release_lease(task_id, owner=self.owner)
            raise
        lifecycle = self._lifecycle(
            state,
            TaskEventLog.continued(self._task_store, self._event_bus, task_id, persisted),
        )
        if state.status is TaskStatus.QUEUED:
            return await self._start(lifecycle, output_type, sandbox=self._task_sandbox(state))
        async with self._until_driven(lifecycle):
            context = self._context(lifecycle, output_type)
            context.run.stats.usage = state.usage
            context.run.resuming = True
            context.humans.approval_decisions = recorded_decisions(persisted)
            await lifecycle.events(TaskResumed, reason=reason, owner=self.owner)
            return await self._drive(lifecycle, self._executor_of(state), context)

    async def recover(self, how: Literal["resume", "fail"] | None = None) -> list[TaskResult]:
        """Resume, or fail, every task whose process died (``how``, else ``AGENT_RECOVERY``).

        Tasks that are ``queued`` or ``running`` with no live lease (or whose owner is a
        process of this machine that died) are taken over one batch at a time, up to four at
        once (``task_recovery``). With ``fail`` each ends ``failed`` with the reason; with
        ``resume`` each runs to its end here (``resume``). A task another kernel takes first
        is left to it, and a task whose stored state is damaged is logged and left. Returns
        the results, in the order the tasks ended.
        """
        mode = how or self._recovery_mode
        if mode == "off":
            return []
        return await self._recovery.recover("fail" if mode == "fail" else "resume")

    async def get_task(self, task_id: str) -> TaskState:
        """The stored task; ``TaskNotFoundError`` if there is none."""
        return await self._task_store.get_task(task_id)

    async def find_task_id(self, reference: str) -> str:
        """The id of the task a person means.

        ``reference`` is a whole id, a unique prefix of one, the task's trace id, or ``last``
        (the newest task).

        Raises:
            TaskNotFoundError: Nothing matches.
            UsageError: A prefix several tasks share (the error lists some of them).
        """
        return await find_task_id(self._task_store, reference)

    async def list_tasks(
        self, *, session_id: str | None = None, status: TaskStatus | None = None, limit: int = 50
    ) -> list[TaskState]:
        """Stored tasks, newest first."""
        return await self._task_store.list_tasks(session_id=session_id, status=status, limit=limit)

    async def page_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        text: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> TaskPage:
        """One page of stored tasks, newest first; see ``ITaskStore.page_tasks``.

        Raises:
            UsageError: ``cursor`` is not the ``next_cursor`` of a page.
        """
        return await self._task_store.page_tasks(
            session_id=session_id, status=status, text=text, cursor=cursor, limit=limit
        )

    def _session_store(self) -> ISessionStore:
        if self._sessions is None:
            raise UsageError(
                "this kernel keeps no session history: its task store has no session store"
            )
        return self._sessions.store

    async def create_session(
        self,
        *,
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> SessionInfo:
        """Start a conversation for ``user_id``, with the host's ``metadata``; returns it.

        Its tasks are ``TaskRequest(session_id=...)``: each starts from the session's history
        and adds its turn when it ends. (A task naming a session that does not exist starts
        one too, with no user.) ``session_id`` is a new random id when not given.

        Raises:
            UsageError: A session with ``session_id`` exists, or this kernel keeps no sessions.
        """
        created = now()
        session = SessionInfo(
            session_id=session_id or uuid.uuid4().hex,
            user_id=user_id,
            metadata=dict(metadata or {}),
            created_at=created,
            updated_at=created,
        )
        await self._session_store().create_session(session)
        return await self._session_store().get_session(session.session_id)

    async def list_sessions(
        self, *, user_id: str | None = None, limit: int = 50
    ) -> list[SessionInfo]:
        """Sessions, most recently active first; only ``user_id``'s when given."""
        return await self._session_store().list_sessions(user_id=user_id, limit=limit)

    async def get_session(self, session_id: str) -> SessionInfo:
        """The session; ``SessionNotFoundError`` if there is none."""
        return await self._session_store().get_session(session_id)

    async def session_transcript(self, session_id: str) -> SessionTranscript:
        """The session with its whole history, in order, and the summaries made of it.

        Raises:
            SessionNotFoundError: No such session.
        """
        store = self._session_store()
        session = await store.get_session(session_id)
        return SessionTranscript(
            session=session,
            entries=await store.entries(session_id),
            summaries=await store.summaries(session_id),
        )

    async def compact_session(self, session_id: str) -> SessionSummary | None:
        """Summarize the session's history now, every turn of it, as a host's "compact" does.

        Later tasks start from the summary instead of the turns it covers (the turns stay in
        the transcript). The model call is traced in the trace of the session's newest task.
        Returns the new summary, or ``None`` when there is nothing new to summarize.

        Raises:
            SessionNotFoundError: No such session.
            ModelError: The summary call failed (nothing changed).
            UsageError: This kernel keeps no session history.
        """
        store = self._session_store()
        await store.get_session(session_id)

        async def tracer_of(task_id: str) -> Tracer:
            return Tracer.of(self._trace_store, await self._task_store.get_task(task_id))

        assert self._sessions is not None  # _session_store checked it
        return await self._sessions.compact(session_id, tracer_of)

    async def fork_session(
        self,
        session_id: str,
        *,
        at_turn: int | None = None,
        new_session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """A new session holding ``session_id``'s conversation up to and including ``at_turn``.

        Turns are numbered from 1 as the transcript shows them (``SessionEntry.turn``);
        ``None`` forks at the latest one. The fork gets copies of the live turns 1 to
        ``at_turn`` and of the summaries of them, the origin's user and (unless given)
        metadata, and ``forked_from``; its later tasks see only that history. It carries
        what the origin had used when ``at_turn`` was added (``inherited_usage``), counted
        against the session usage limits. The origin is not changed. All of it is one
        transaction (see ``session_controls``).

        Raises:
            SessionNotFoundError: No such session.
            SessionBusyError: A task of the session has not ended (nothing is written).
            UsageError: No such turn, or it was superseded by a retry; or a session with
                ``new_session_id`` exists.
        """
        store = self._session_store()
        origin = await store.get_session(session_id)
        entries = await store.entries(session_id)
        turn = turn_entries(session_id, entries, at_turn, "fork")[0].turn
        created = now()
        fork = SessionInfo(
            session_id=new_session_id or uuid.uuid4().hex,
            user_id=origin.user_id,
            metadata=dict(metadata if metadata is not None else origin.metadata),
            created_at=created,
            updated_at=created,
        )
        return await store.fork_session(session_id, at_turn=turn, new_session=fork)

    async def retry_from_turn(
        self,
        session_id: str,
        turn: int,
        *,
        task: str | None = None,
        task_id: str | None = None,
    ) -> TaskResult:
        """Run turn ``turn`` of the session again, as a new task; returns its result.

        Turn ``turn`` and every live turn after it are superseded: they stay in the
        transcript (``SessionEntry.superseded_by``) but no prompt holds them again. The new
        task runs with the original task's request (``task`` in place of its text when
        given) from the history before ``turn``, and its turn takes the next number. The
        supersession and the task's creation are one transaction. ``task_id`` names the
        new task, as in ``execute_task``. A retry that fails adds its failed turn (retry that
        one); one that ended without a turn (its caller canceled it) leaves ``turn``
        retryable again (see ``session_controls``).

        Raises:
            SessionNotFoundError: No such session.
            SessionBusyError: A task of the session has not ended (nothing is changed).
            SessionClosedError: The session is closed.
            UsageError: No such turn, it was superseded, or ``task`` is blank.
        """
        store = self._session_store()
        await store.get_session(session_id)
        for held in await self._task_store.list_tasks(session_id=session_id, limit=1):
            if not held.status.is_terminal:
                raise SessionBusyError(session_id, held.task_id, held.status.value, "retry")
        entries = turn_entries(
            session_id, await store.entries(session_id), turn, "retry", abandoned=True
        )
        try:
            original: TaskState | None = await self._task_store.get_task(entries[0].task_id)
        except TaskNotFoundError:
            original = None
        request = retry_request(session_id, turn, entries, original, task)
        return await self._execute(request, task_id or uuid.uuid4().hex, None, supersede=turn)

    async def _carried_usage(self, session_id: str) -> TokenUsage:
        """What ``session_id`` carries from the session it was forked from (its limits')."""
        try:
            return (await self._session_store().get_session(session_id)).inherited_usage
        except SessionNotFoundError:
            return TokenUsage()

    async def close_session(self, session_id: str) -> SessionInfo:
        """Close the session: its history stays readable, it takes no more tasks.

        A task that runs in it meanwhile still ends and adds its turn.

        Raises:
            SessionNotFoundError: No such session.
        """
        return await self._session_store().close_session(session_id, at=now())

    async def delete_session(self, session_id: str) -> DeletedSession:
        """Delete the session with its history, summaries, tasks and their records.

        The tasks' events, spans, checkpoints, conversation logs, tool-call ledger rows and
        approval requests go too. Refused while one of its tasks has not ended (cancel it
        first).

        Raises:
            SessionNotFoundError: No such session.
            SessionBusyError: A task of the session is queued, running or waiting for a human.
        """
        return await self._session_store().delete_session(session_id)

    async def ingest(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str | None = None,
        force: bool = False,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> list[IngestResult]:
        """Add a file, or every supported file under a folder, to the knowledge base.

        What ``core-agent ingest PATH`` does, on this kernel's stores: the documents go into
        ``namespace`` (``AGENT_KNOWLEDGE_NAMESPACE`` when ``None``), where the
        ``knowledge_search`` tool finds them. A file whose content is unchanged since its
        last ingestion is ``unchanged`` (unless ``force``); one that fails is ``failed``, with
        the reason, and nothing of it is written, while the others go on. ``progress`` is
        called after each step. Returns one result per file, in file order.

        Raises:
            UsageError: ``path`` does not exist or is a file no loader reads, or this kernel
                was built without a knowledge base.
        """
        if self._ingestion is None:
            raise UsageError("this kernel was built without a knowledge base to ingest into")
        return await self._ingestion().ingest_path(
            Path(path),
            namespace=namespace or self._knowledge_namespace,
            force=force,
            progress=progress,
        )

    async def task_events(self, task_id: str) -> list[TaskEvent]:
        """The persisted events of a task, in order."""
        await self._task_store.get_task(task_id)
        return list(await self._task_store.list_events(task_id))

    async def task_spans(self, task_id: str) -> list[Span]:
        """The spans of a task, in start order."""
        return await self._trace_store.list_spans(task_id=task_id)

    async def metrics(
        self, *, since: datetime | None = None, session_id: str | None = None
    ) -> AgentMetrics:
        """Tasks by status, tokens and cost, latencies, models, tools and approvals.

        Over every task, or those created at or after ``since`` (timezone-aware), or those
        of ``session_id``, or both; computed by the stores (see
        ``core_agent.contracts.metrics`` for what each number counts).

        Raises:
            UsageError: ``since`` has no time zone.
            SessionNotFoundError: There is no session ``session_id``.
            StorageError: A store could not be read.
        """
        if since is not None and since.tzinfo is None:
            raise UsageError("metrics: `since` needs a time zone (datetime.now(UTC) - ...)")
        if session_id is not None and self._sessions is not None:
            await self._sessions.store.get_session(session_id)
        scope = MetricsScope(since=since, session_id=session_id)
        return await collect_metrics(self._task_store, self._trace_store, scope)

    async def pending_approvals(self, limit: int = 1000) -> list[ApprovalRequest]:
        """Questions that tasks wait on, oldest first (they survive restarts).

        One query on the store's requests: a task whose stored state is damaged does not
        hide the others'.
        """
        return await self._task_store.pending_approvals(limit=limit)

    async def cancel_task(self, task_id: str, reason: str = "canceled by host") -> None:
        """Cancel a task wherever it runs.

        Running here (also while its host's approver is asked about it), it is interrupted
        and ends ``canceled``. Running in another live process, the request is recorded and
        that process carries it out within ``AGENT_CANCEL_CHECK_S`` (its host gets a
        ``canceled`` result). Queued, waiting for a human, or left by a dead process, it is
        marked ``canceled`` at once.

        Raises:
            TaskNotFoundError: No such task.
            InvalidTransitionError: It already ended.
        """
        for child in self._nested.descendants(task_id):
            # Deepest first, each with the reason; the parent's own cancel would reach them
            # too, but as "the caller was canceled".
            self._driver.cancel(child, f"its parent task {task_id} was canceled: {reason}")
        if self._driver.cancel(task_id, reason):
            return
        state = await self._recovery.free_if_owner_died(await self._task_store.get_task(task_id))
        check_transition(task_id, state.status, TaskStatus.CANCELED)
        if (
            state.status in (TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL)
            and state.owner is not None
            and state.lease_expires_at is not None
            and state.lease_expires_at > now()
        ):
            await self._task_store.request_cancel(task_id, reason)
            state = await self._task_store.get_task(task_id)
            if state.owner is not None or state.status.is_terminal:
                return  # its owner carries the request out (or it has just ended)
            # Its owner let go (it stopped to wait for a human) as the request was written:
            # nobody holds it to carry the request out, so it is done here.
        events = TaskEventLog.continued(
            self._task_store, self._event_bus, task_id, await self._task_store.list_events(task_id)
        )
        event = events.make(TaskCanceled, reason=reason, usage=state.usage)

        async def root_span() -> None:  # stored with the move, only if it is
            await task_span(
                self._trace_store, state, TaskStatus.CANCELED, state.usage, error=reason
            )
            # Nobody runs it here to add its turn: a later host never will either.
            await self._record_ended_unrun(state, TaskStatus.CANCELED, reason)

        try:
            await self._task_store.transition(
                task_id,
                from_status=state.status,
                to_status=TaskStatus.CANCELED,
                event=event,
                then=root_span,
            )
        except (InvalidTransitionError, StorageError):
            # Its owner carried the request out meanwhile: canceled either way.
            if (await self._task_store.get_task(task_id)).status is TaskStatus.CANCELED:
                return
            raise
        await self._event_bus.publish(event)

    async def _record_ended_unrun(
        self, state: TaskState, status: TaskStatus, error: str | None
    ) -> None:
        """Add the session turn of a task ended where nobody ran it (with sessions on)."""
        if self._sessions is not None:
            await self._sessions.record_ended_unrun(state, status, error)

    async def _stream(
        self, task_id: str, run: Callable[[], Awaitable[TaskResult]]
    ) -> AsyncGenerator[AgentEvent, None]:
        if self._background is not None:
            # Closed with this generator, not whenever the finaliser gets to it.
            streamed = self._stream_in_background(task_id, run, self._background)
            async with aclosing(streamed) as events:
                async for event in events:
                    yield event
            return
        send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=math.inf)
        failure: list[BaseException] = []
        tree = TaskTree(task_id)

        def forward(event: BaseModel) -> None:
            admitted = tree.admit(event)
            if admitted is not None:
                event = admitted
                # The last events (the task ending canceled) arrive after a consumer that
                # left early closed its end: nobody is listening, so they are dropped here.
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
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

    async def _stream_in_background(
        self,
        task_id: str,
        run: Callable[[], Awaitable[TaskResult]],
        background: anyio.abc.TaskGroup,
    ) -> AsyncGenerator[AgentEvent, None]:
        """``_stream`` for an entered kernel: the run lives in the kernel's task group.

        The generator holds no task group or cancel scope across its ``yield``, so it may be
        closed in any task: by ``aclosing``, or by the event loop's finaliser when a consumer
        breaks out of ``async for`` and drops it. Closing it cancels the run and waits for it
        to end ``canceled``.
        """
        send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=math.inf)
        failure: list[BaseException] = []
        ended = anyio.Event()
        scope = anyio.CancelScope()
        tree = TaskTree(task_id)

        def forward(event: BaseModel) -> None:
            admitted = tree.admit(event)
            if admitted is not None:
                event = admitted
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    send.send_nowait(event)

        subscription = self._event_bus.subscribe(None, forward)

        async def drive() -> None:
            try:
                with scope:
                    await run()
            except Exception as exc:
                failure.append(exc)
            finally:
                send.close()
                ended.set()

        background.start_soon(drive)
        closed_early = True
        try:
            async with receive:
                async for event in receive:
                    yield event
            closed_early = False
        finally:
            subscription.cancel()
            if closed_early:
                # The consumer stopped listening (or was cancelled): the run ends "canceled".
                scope.cancel()
                with anyio.CancelScope(shield=True):
                    await ended.wait()
        if failure:
            raise failure[0]

    def _specs(self, request: TaskRequest) -> list[Any]:
        names = list(request.tools) if request.tools is not None else None
        return self._tools.specs(names)

    def _executor_of(self, state: TaskState) -> IExecutor:
        """The executor of the strategy ``state`` started with (ReAct for an unknown one)."""
        return self._executors.get(state.strategy or "react") or self._executors["react"]

    def _lifecycle(self, state: TaskState, events: TaskEventLog) -> TaskLifecycle:
        return TaskLifecycle(
            task_store=self._task_store,
            events=events,
            state=state,
            owner=self.owner,
            lease_s=self._lease_s,
            trace_store=self._trace_store,
        )

    async def _execute(
        self,
        request: TaskRequest,
        task_id: str,
        response_model: type[BaseModel] | None,
        *,
        supersede: int | None = None,
    ) -> TaskResult:
        # Created before it is routed: the route is the first span under the task's root.
        created = now()
        routing = await self._routing(request)
        sandbox = self._sandbox
        if sandbox is not None and request.workspace_roots:
            sandbox = sandbox.with_roots(request.workspace_roots)
        state = TaskState(
            task_id=task_id,
            session_id=request.session_id or uuid.uuid4().hex,
            trace_id=new_trace_id(),
            status=TaskStatus.QUEUED,
            request=request,
            created_at=created,
            updated_at=created,
            sandbox=sandbox.profile() if sandbox is not None else None,
            owner=self.owner,
            lease_expires_at=lease_until(self._lease_s),
            response_schema=model_schema(response_model) if response_model else None,
            response_model=model_name(response_model) if response_model else None,
        )
        lifecycle = self._lifecycle(state, TaskEventLog(self._task_store, self._event_bus, task_id))
        queued = lifecycle.events.make(
            TaskQueued, session_id=state.session_id, trace_id=state.trace_id, request=request
        )
        if request.parent is not None:
            # A nested agent's task, in a session of its own that nobody else can be in yet,
            # created in its parent's step (which holds the handoff): its creation, its start
            # and its route commit with the handoff (``_start_held``), its run apart.
            await self._task_store.create_task(state, queued)

            async def publish_queued() -> None:
                await lifecycle.events.publish(queued)

            if not self._task_store.after_commit(publish_queued):
                await publish_queued()
            return await self._start(
                lifecycle, response_model, sandbox=sandbox, routing=routing, in_callers_step=True
            )
        # One task at a time per session: a conversation's next turn needs the last one's end.
        # A retry supersedes the turns it replaces in the same transaction.
        await self._task_store.create_task(state, queued, exclusive=True, supersede_turn=supersede)
        await lifecycle.events.publish(queued)
        # Its run commits step by step, apart from any unit of work open around it.
        with self._task_store.independent_work():
            return await self._start(lifecycle, response_model, sandbox=sandbox, routing=routing)

    async def _routing(
        self, request: TaskRequest
    ) -> tuple[RoutingDecision, IExecutor, datetime, datetime]:
        """The router's decision, the executor it names, and when routing began and ended.

        Raises:
            ConfigurationError: The strategy it names is not installed.
        """
        await self._list_tools_once()
        routed_at = now()
        decision = await self._router.route(request, self._specs(request))
        routed_until = now()
        executor = self._executors.get(decision.strategy)
        if executor is None:
            raise ConfigurationError(
                f"strategy {decision.strategy!r} is not installed; "
                f"available: {', '.join(sorted(self._executors))}"
            )
        return decision, executor, routed_at, routed_until

    async def _start(
        self,
        lifecycle: TaskLifecycle,
        response_model: type[BaseModel] | None,
        *,
        sandbox: IToolSandbox | None,
        routing: tuple[RoutingDecision, IExecutor, datetime, datetime] | None = None,
        in_callers_step: bool = False,
    ) -> TaskResult:
        """Start a queued task: route it (unless done), record the route, run it.

        ``in_callers_step``: the task was created in the unit of work open here (a nested
        agent's, in its parent's step): its start commits with it, its run apart.
        """
        async with self._until_driven(lifecycle):
            return await self._start_held(
                lifecycle, response_model, sandbox, routing, in_callers_step
            )

    async def _start_held(
        self,
        lifecycle: TaskLifecycle,
        response_model: type[BaseModel] | None,
        sandbox: IToolSandbox | None,
        routing: tuple[RoutingDecision, IExecutor, datetime, datetime] | None,
        in_callers_step: bool = False,
    ) -> TaskResult:
        state = lifecycle.state
        decision, executor, routed_at, routed_until = routing or await self._routing(state.request)
        tracer = Tracer.of(self._trace_store, state)
        context = self._context(lifecycle, response_model, sandbox=sandbox)
        sessions = self._sessions

        # A nested agent's task neither recalls nor takes a conversation's history: its
        # sub-task was written by its parent, which did both (see ``nested_agents``).
        nested = state.request.parent is not None

        async def route() -> None:
            await tracer.record(
                "planning",
                "route",
                started_at=routed_at,
                ended_at=routed_until,
                attributes={
                    "strategy": decision.strategy,
                    "reason": decision.reason,
                    "forced": decision.forced,
                    "features": route_features(decision.features, content=tracer.content),
                },
            )
            await lifecycle.events(
                StrategySelected,
                strategy=decision.strategy,
                reason=decision.reason,
                features=decision.features,
            )
            # With the move: a task resumed after a crash does not run its start again,
            # and a child of a tainted parent must not carry on as if it were clean.
            link = state.request.parent
            if link is not None and link.tainted:
                await context.taint(
                    f"task {link.task_id}", reason="its parent task held untrusted content"
                )

        async def before_first_step() -> None:
            if not nested:
                await self._recall(state, context)
            await self._capabilities.add_context(state, context, self._trace_store)
            if sessions is not None and not nested:
                await sessions.prepare(state, context, self._specs(state.request))

        async def after_start() -> None:
            await before_first_step()
            await self._task_store.flush()

        if in_callers_step:
            # One commit with the caller's step (the parent's handoff, the creation), before
            # the task's model speaks; then its run commits apart from that step: the
            # parent's writes and the child's never wait on, or fail with, each other.
            await lifecycle.start(executor.strategy, then=route)
            with self._task_store.independent_work():
                return await self._drive(lifecycle, executor, context, prepare=after_start)

        async def prepare() -> None:
            # Two commits: the move to running with its route, then (in the driver's unit of
            # work) what the task does before its first step. One commit for both would come
            # after the recall's reads, where many tasks started at once no longer arrive
            # together and their commits are no longer grouped (``SqliteDatabase.transact``).
            await lifecycle.start(executor.strategy, then=route)
            await after_start()

        return await self._drive(lifecycle, executor, context, prepare=prepare)

    async def _drive(
        self,
        lifecycle: TaskLifecycle,
        executor: IExecutor,
        context: ExecutionContext,
        *,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> TaskResult:
        """``TaskDriver.drive``; the task's response model is kept only while it waits.

        Once the task ends, its turn is added to its session's history.
        """
        self.warm_up_model()
        task_id = lifecycle.task_id
        if context.task.output_type is not None:
            self._response_models[task_id] = context.task.output_type
        result: TaskResult | None = None
        self._nested.started(context)
        record = self._sessions is not None and lifecycle.state.request.parent is None
        if record and self._sessions is not None:
            sessions, state = self._sessions, lifecycle.state

            async def add_turn(ended: TaskResult) -> None:
                await sessions.record(state, context, ended)

            # Stored with the ending move: a crash cannot leave the task ended without it.
            lifecycle.on_end = add_turn
        try:
            result = await self._driver.drive(lifecycle, executor, context, prepare=prepare)
        finally:
            self._nested.stopped(context)
            # Kept for a decision taken in this process; a task resolved in another one
            # leaves its entry behind (one class reference per such task).
            if result is None or result.status is not TaskStatus.WAITING_APPROVAL:
                self._response_models.pop(task_id, None)
        if record and self._sessions is not None and not lifecycle.ended_here:
            # Ended elsewhere (canceled by another process): its turn is added here.
            await self._sessions.record(lifecycle.state, context, result)
        return result

    def _response_model_for(
        self, state: TaskState, given: type[BaseModel] | None
    ) -> type[BaseModel] | None:
        """The response model a resumed run of ``state`` answers with (``response_models``)."""
        known = self._response_models.get(state.task_id)
        return response_model_for(state, given=given, known=known)

    async def _recall(self, state: TaskState, context: ExecutionContext) -> None:
        """Put the long-term memories relevant to the task after the system prompt."""
        if self._long_term_memory is None or self._recall_k < 1:
            return
        tracer = Tracer.of(self._trace_store, state)
        try:
            async with tracer.span("memory", "memory.recall") as span:
                query = state.request.task
                items = await self._long_term_memory().search(
                    "long_term", self._memory_namespace, query, self._recall_k
                )
                span.attributes["recalled"] = [item.key for item in items]
                span.attributes["tainted"] = [item.key for item in items if item.tainted]
                if tracer.content:
                    span.attributes["query"] = tracer.text(query)
                    span.attributes["memories"] = [
                        {"key": item.key, "value": tracer.text(item.value)} for item in items
                    ]
        except CoreAgentError as exc:
            # Memory helps a task; it is not worth failing one for.
            log.warning("task %s: long-term recall failed: %s", state.task_id, exc)
            return
        message = recall_message(items)
        if message is not None:
            context.run.messages.insert(1, message)
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
        lifecycle: TaskLifecycle,
        response_model: type[BaseModel] | None,
        *,
        sandbox: IToolSandbox | None = None,
    ) -> ExecutionContext:
        state = lifecycle.state
        system = state.request.system_prompt or self._system_prompt
        instructions = self._capabilities.instructions()
        if instructions:
            system = f"{system}\n\n{instructions}"
        # The host's own words for the task (not the kernel's default prompt), for the
        # executors that write their own system prompts.
        asked = "\n\n".join(
            text for text in (state.request.system_prompt, instructions) if text and text.strip()
        )
        humans = HumanChannel()
        if self._approval_gateway is not None:
            task_id = state.task_id
            humans.request_approval = HumanApprovals(
                lifecycle,
                self._ask_host,
                flush=self._task_store.flush,
                left_alone=lambda: self._driver.left_alone(task_id),
                on_lost=lambda: self._driver.lose(task_id),
            )
        return ExecutionContext(
            task=TaskIdentity(
                task_id=state.task_id,
                session_id=state.session_id,
                trace_id=state.trace_id,
                request=state.request,
                max_turns=state.request.max_turns or self._max_turns,
                output_type=response_model,
                sandbox=sandbox if sandbox is not None else self._task_sandbox(state),
                limits=(state.request.limits or UsageLimits()).with_defaults(self._limits),
                session_limits=self._session_limits,
                instructions=asked,
            ),
            run=RunState(
                messages=[
                    # The notice is part of the safety design, not of the prompt set: it
                    # follows every system prompt, configured or requested, unremovably.
                    SystemMessage(content=f"{system}\n\n{UNTRUSTED_NOTICE}"),
                    UserMessage(content=state.request.task),
                ],
                tainted=state.tainted,
            ),
            emit=lifecycle.events,
            humans=humans,
            unit_of_work=self._task_store.unit_of_work,
            flush=self._task_store.flush,
            hand_over=self._task_store.hand_over,
            tool_hooks=tuple(self._tool_hooks),
        )

    async def _ask_host(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """The gateway's decision; ``None`` when nobody can be asked now."""
        if self._approval_gateway is None:
            return None
        return await self._approval_gateway.ask(request)

    async def _pending_request(self, request_id: str) -> tuple[TaskState, ApprovalRequest]:
        record = await self._task_store.approval(request_id)
        if record is None:
            raise UsageError(f"no task is waiting on approval request {request_id!r}")
        # Read before deciding: a task whose log is damaged must fail here, not half-resume.
        await self._task_store.list_events(record.request.task_id)
        if record.decision is not None:
            raise already_decided(request_id, record.decision)
        state = await self._recovery.free_if_owner_died(
            await self._task_store.get_task(record.request.task_id)
        )
        if state.status is not TaskStatus.WAITING_APPROVAL:
            raise UsageError(
                f"task {state.task_id} is {state.status.value}: it no longer waits on "
                f"request {request_id!r}"
            )
        return state, record.request

    async def _trace_decision(
        self, state: TaskState, request: ApprovalRequest, decision: ApprovalDecision
    ) -> None:
        """The ``approval`` span of a human's decision, from the request to now.

        Recorded once the decision is: of two racing resolvers only one writes it.
        """
        tracer = Tracer.of(self._trace_store, state)
        attributes: dict[str, Any] = {
            "request_id": request.request_id,
            "call_hash": request.call_hash,
            "approved": decision.approved,
            "scope": decision.scope,
            "decided_by": decision.decided_by,
        }
        # The human's words: content.
        if tracer.content:
            attributes["reason"] = decision.reason
        await tracer.record(
            "approval",
            request.tool_call.name if request.tool_call else "question",
            started_at=request.created_at,
            ended_at=now(),
            attributes=attributes,
        )

    async def _resume_tool_call(
        self,
        state: TaskState,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        output_type: type[BaseModel] | None,
    ) -> TaskResult:
        """Record a decision on a suspended call; resume once every request has one."""
        lifecycle = self._lifecycle(
            state, TaskEventLog(self._task_store, self._event_bus, state.task_id)
        )
        decided = await self._decide(lifecycle, decision, then=TaskStatus.RUNNING)
        async with self._until_driven(lifecycle):
            await self._trace_decision(state, request, decision)
            persisted = await self._task_store.list_events(state.task_id)
            stats = RunStats(usage=state.usage)
            if decided.still_open:
                still_open = open_requests(persisted)
                return lifecycle.result(
                    TaskStatus.WAITING_APPROVAL,
                    stats,
                    error="waiting for the other pending approvals",
                    pending_approval=still_open[0].request_id if still_open else None,
                )
            lifecycle.events = TaskEventLog.continued(
                self._task_store, self._event_bus, state.task_id, persisted
            )
            context = self._context(lifecycle, output_type)
            context.run.stats = stats
            context.run.resuming = True
            context.humans.approval_decisions = recorded_decisions(persisted)
            await lifecycle.events(
                TaskResumed, reason="every pending approval has a decision", owner=self.owner
            )
            return await self._drive(lifecycle, self._executor_of(state), context)
