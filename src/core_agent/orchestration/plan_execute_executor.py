"""Plan-and-execute: plan a graph of steps, run ready steps concurrently, then answer.

Steps run in layers computed by ``graphlib.TopologicalSorter``: every step whose
dependencies are done starts at once (bounded by ``max_parallel_steps``), each as a constrained
ReAct loop whose result is handed to its dependents. A failed step triggers a replan of the
remaining work (bounded); if planning or execution still fails, or a model call fails while
planning or writing the answer, the task falls back to a constrained ReAct loop over the whole
task; if that fails too, the run stops with a question for a human.

A ``PlanCheckpoint`` records the plan, the results so far and the phase, after the plan is
made and after each step; each step's loop (and the synthesis and the fallback) keeps its own
journal. A resumed run (``context.run.resuming``) reuses finished steps' results, carries each
unfinished loop on from its last step (its tool calls through the ledger), and re-enters the
synthesis or the fallback where it was. A run resumed with a human's guidance keeps the
finished steps and passes the guidance to the others (or plans anew with it when no step
finished).

A risky call inside a step (or the fallback) suspends the whole task as in ReAct: the step's
loop checkpoints its turn with the pending request and stops; no further step starts, the
steps already running finish (their results are saved) or stop at a risky call of their own,
and the run raises ``ApprovalPendingError`` with every waiting step's requests. Once a human
decided them all, the run resumes: finished steps are skipped, and each suspended loop carries
on from its journal with its own decisions (an approved call runs once, through the ledger; a
denied one is shown to the model as denied).

The task's usage limits are one budget for the whole run (the planner, every step, the
synthesis and the fallback share its ``RunStats``): a step stopped by one ends the run with
``UsageLimitExceededError`` at once, with no replan and no fallback. So does every
``RunStoppedError`` (a replay that parted from its recording, say), wherever it is raised:
nothing here recovers from it, and no human is asked about it.
"""

from __future__ import annotations

import dataclasses
import graphlib
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio
from pydantic import BaseModel, Field

from core_agent.contracts.checkpoint_store import Checkpoint, ICheckpointStore
from core_agent.contracts.errors import (
    ApprovalPendingError,
    ModelError,
    PlanningError,
    RunError,
    RunStoppedError,
    StructuredOutputError,
)
from core_agent.contracts.executor import (
    Escalation,
    ExecutionContext,
    ExecutionOutcome,
    IExecutor,
)
from core_agent.contracts.planner import IPlanner, Plan, PlanStep
from core_agent.contracts.tool import ToolSpec
from core_agent.contracts.tool_call_ledger import IToolCallLedger
from core_agent.contracts.trace_store import ITraceStore
from core_agent.contracts.untrusted import UNTRUSTED_NOTICE
from core_agent.observability.tracer import Tracer
from core_agent.orchestration.loop_journal import LoopJournal
from core_agent.orchestration.react_loop import LoopResult, ReActLoop, TurnSuspended
from core_agent.orchestration.structured_output import with_schema
from core_agent.prompts import PromptSet, default_prompts
from core_agent.prompts.task_instructions import with_task_instructions
from shared.agent_protocol import (
    ApprovalRequest,
    ChatMessage,
    PlanCreated,
    PlanStepCompleted,
    PlanStepStarted,
    StrategyFallback,
    StrategyMode,
    SystemMessage,
    TokenUsage,
    UserMessage,
)

CHECKPOINT_KEY = "plan_execute"

STEP_MARKER = "Your step"
"""Opens a step's user message (scripted models and tests match on it)."""
SYNTHESIS_MARKER = "Write the final answer"
"""Opens the synthesis message."""
_PLAN_SHAPE = {"id", "depends_on"}
"""What the planning span keeps of each step without content recording."""


@dataclass(frozen=True, slots=True)
class PlanExecuteLimits:
    """Bounds of plan-and-execute."""

    max_parallel_steps: int = 3
    step_max_turns: int = 6
    max_replans: int = 1
    fallback_max_turns: int = 8
    result_chars_per_step: int = 4000


class PlanCheckpoint(Checkpoint):
    """Where a plan-and-execute run stands (see the module docstring)."""

    kind: Literal["plan_execute"] = "plan_execute"
    version: Literal[1] = 1
    run_id: str
    """Prefix of the keys of this run's loops: a run started afresh gets new ones."""
    phase: Literal["executing", "synthesizing", "falling_back"]
    plan: Plan | None = None
    results: dict[str, str] = Field(default_factory=dict)
    revision: int = 0
    replans: int = 0
    prior: str = ""
    failures: list[str] = Field(default_factory=list)
    tainted: bool = False
    usage: TokenUsage = Field(default_factory=TokenUsage)
    turns: int = 0
    llm_calls: int = 0
    tool_calls: int = 0


@dataclass(slots=True)
class _Run:
    """What one run of the executor carries between its phases."""

    run_id: str
    plan: Plan | None = None
    results: dict[str, str] = dataclasses.field(default_factory=dict)
    revision: int = 0
    replans: int = 0
    prior: str = ""
    failures: list[str] = dataclasses.field(default_factory=list)
    resuming: bool = False


@dataclass(frozen=True, slots=True)
class _StepSuspended:
    """A step whose loop stopped at calls that wait for a human (its journal holds them)."""

    requests: list[ApprovalRequest]


_StepOutcome = str | RunError | _StepSuspended | None
"""A step's result, its failure, its suspension, or ``None``: not started (the run suspends)."""


class _StepFailed(Exception):
    def __init__(self, step_id: str, error: RunError) -> None:
        self.step_id = step_id
        self.error = error
        super().__init__(f"step {step_id!r} failed: {type(error).__name__}: {error}")


class PlanExecuteExecutor(IExecutor):
    """Plans, runs the plan graph with bounded concurrency, replans, falls back, escalates.

    A step's loop and the synthesis have the ``step`` and ``synthesis`` prompts of ``prompts``
    (the shipped set when ``None``) as system prompts; the fallback keeps the task's own.
    """

    def __init__(
        self,
        *,
        planner: IPlanner,
        loop: ReActLoop,
        trace_store: ITraceStore,
        checkpoints: ICheckpointStore,
        ledger: IToolCallLedger | None = None,
        limits: PlanExecuteLimits | None = None,
        prompts: PromptSet | None = None,
    ) -> None:
        prompts = prompts if prompts is not None else default_prompts()
        self._step_system = prompts.render("step")
        self._synthesis_system = prompts.render("synthesis")
        self._planner = planner
        self._loop = loop
        self._trace_store = trace_store
        self._checkpoints = checkpoints
        self._ledger = ledger
        self._limits = limits or PlanExecuteLimits()

    @property
    def strategy(self) -> StrategyMode:
        """Always ``plan_execute``."""
        return "plan_execute"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Plan, execute, replan, fall back, or escalate; see the module docstring.

        Raises:
            ApprovalPendingError: Risky calls of steps (or of the fallback) wait for a human;
                what the run needs to resume is saved.
            CorruptStateError: A resumed run's checkpoint cannot be read.
            RunStoppedError: The run must end (``UsageLimitExceededError``: going on would
                pass one of the task's usage limits); raised wherever it happened.
        """
        tracer = Tracer.of(self._trace_store, context.task)
        # Every loop here keeps a journal, so a risky call can wait durably for a human.
        context.humans.can_suspend = True
        allowed = self._allowed(context)
        specs = self._loop.tools.specs(allowed)
        run, phase = await self._restore(context)
        feedback = context.run.guidance
        if phase == "falling_back":
            return await self._fall_back(context, allowed, run)
        if phase == "synthesizing" and run.plan is not None:
            return await self._synthesize_or_fall_back(context, allowed, run)
        while True:
            try:
                if run.plan is None:
                    run.plan = await self._make_plan(context, tracer, specs, feedback, run.revision)
                    await self._save(context, run, "executing")
                await self._execute(context, tracer, run, allowed)
                break
            except RunStoppedError:
                raise
            except PlanningError as exc:
                run.failures.append(f"planning failed: {exc}")
                return await self._fall_back(context, allowed, run)
            except ModelError as exc:
                run.failures.append(f"planning failed: {type(exc).__name__}: {exc}")
                return await self._fall_back(context, allowed, run)
            except _StepFailed as exc:
                run.failures.append(str(exc))
                if run.replans >= self._limits.max_replans:
                    return await self._fall_back(context, allowed, run)
                limit = self._limits.result_chars_per_step
                run.prior = _progress(run.plan, run.results, run.prior, self._cut(limit))
                feedback = f"{exc}.\nAlready done:\n{run.prior or '(nothing)'}"
                run.plan, run.results = None, {}
                run.revision, run.replans = run.revision + 1, run.replans + 1
        return await self._synthesize_or_fall_back(context, allowed, run)

    async def _synthesize_or_fall_back(
        self, context: ExecutionContext, allowed: list[str], run: _Run
    ) -> ExecutionOutcome:
        try:
            return await self._synthesize(context, run)
        except RunStoppedError:
            raise
        except ModelError as exc:
            run.failures.append(f"writing the answer failed: {type(exc).__name__}: {exc}")
            return await self._fall_back(context, allowed, run)

    async def _restore(self, context: ExecutionContext) -> tuple[_Run, str | None]:
        """The run to carry on (resumed) or a new one, and the phase to re-enter."""
        saved = None
        if context.run.resuming:
            saved = await self._checkpoints.load(
                context.task.task_id, CHECKPOINT_KEY, PlanCheckpoint
            )
        if saved is None:
            return _Run(run_id=uuid.uuid4().hex), None
        context.run.tainted = context.run.tainted or saved.tainted
        # The plan checkpoint is saved between steps, the task's row at every suspension:
        # never go back to the older of the two (a limit would be passed, usage undercounted).
        stats = context.run.stats
        stats.usage = _larger_usage(stats.usage, saved.usage)
        stats.turns = max(stats.turns, saved.turns)
        stats.llm_calls = max(stats.llm_calls, saved.llm_calls)
        stats.tool_calls = max(stats.tool_calls, saved.tool_calls)
        run = _Run(
            run_id=saved.run_id,
            plan=saved.plan,
            results=dict(saved.results),
            revision=saved.revision,
            replans=saved.replans,
            prior=saved.prior,
            failures=list(saved.failures),
            resuming=True,
        )
        if context.run.guidance:
            # A human's guidance after the run gave up. With steps done, the plan goes on:
            # their results are kept, the guidance is passed to the remaining steps. With
            # none done, a new plan is made with it. Either way in new loops: none carries on
            # from where it failed.
            if not run.results:
                return _Run(run_id=uuid.uuid4().hex, revision=run.revision + 1), None
            run.run_id = uuid.uuid4().hex
            run.prior = f"{run.prior}\nGuidance from a human: {context.run.guidance}".strip()
            run.failures, run.replans, run.resuming = [], 0, False
            return run, None
        return run, saved.phase

    async def _save(
        self,
        context: ExecutionContext,
        run: _Run,
        phase: Literal["executing", "synthesizing", "falling_back"],
    ) -> None:
        stats = context.run.stats
        async with context.unit_of_work():
            await self._checkpoints.save(
                context.task.task_id,
                CHECKPOINT_KEY,
                PlanCheckpoint(
                    run_id=run.run_id,
                    phase=phase,
                    plan=run.plan,
                    results=run.results,
                    revision=run.revision,
                    replans=run.replans,
                    prior=run.prior,
                    failures=run.failures,
                    tainted=context.run.tainted,
                    usage=stats.usage,
                    turns=stats.turns,
                    llm_calls=stats.llm_calls,
                    tool_calls=stats.tool_calls,
                ),
            )

    async def _run_loop(
        self,
        context: ExecutionContext,
        run: _Run,
        name: str,
        messages: list[ChatMessage],
        *,
        max_turns: int,
        allowed: Sequence[str],
        parent_span_id: str | None,
        output_type: type[BaseModel] | None = None,
    ) -> LoopResult:
        """Run one of this run's loops with its journal (carried on when it had started).

        A loop resumed after a suspension sees the decisions on its own requests only: tool
        call ids come from the model and may repeat across steps running side by side.

        Raises:
            TurnSuspended: The loop saved its turn and waits for a human.
        """
        journal = LoopJournal(
            self._checkpoints,
            context.task.task_id,
            f"plan:{run.run_id}:{name}",
            ledger=self._ledger,
        )
        loop_context = context
        if run.resuming:
            restored = await journal.restore()
            if restored is not None:
                checkpoint, saved = restored
                messages[:] = saved
                decided = checkpoint.decided_calls(context.humans.approval_decisions)
                loop_context = dataclasses.replace(
                    context, humans=dataclasses.replace(context.humans, resumed_approvals=decided)
                )
        return await self._loop.run(
            loop_context,
            messages,
            max_turns=max_turns,
            allowed=allowed,
            parent_span_id=parent_span_id,
            output_type=output_type,
            journal=journal,
        )

    def _allowed(self, context: ExecutionContext) -> list[str]:
        request = context.task.request
        return list(request.tools) if request.tools is not None else self._loop.tools.names()

    async def _make_plan(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        specs: Sequence[ToolSpec],
        feedback: str | None,
        revision: int,
    ) -> Plan:
        async with tracer.span(
            "planning", "plan", parent_span_id=context.task.parent_span_id
        ) as span:
            span.attributes["revision"] = revision
            if feedback and tracer.content:
                span.attributes["feedback"] = tracer.text(feedback)
            # The planner's model calls nest under this span; stats and events stay shared.
            planning_context = context.under(span.span_id)
            try:
                plan = await self._planner.plan(planning_context, specs, feedback)
            except PlanningError as exc:
                span.attributes["refusals"] = exc.attempts if tracer.content else len(exc.attempts)
                raise
            # A step's goal, success criterion and tool hints are the model's words: content,
            # like its answers; without it the plan's shape stays.
            span.attributes["steps"] = [
                step.model_dump() if tracer.content else step.model_dump(include=_PLAN_SHAPE)
                for step in plan.steps
            ]
        await context.emit(
            PlanCreated, revision=revision, steps=[step.model_dump() for step in plan.steps]
        )
        return plan

    async def _execute(
        self, context: ExecutionContext, tracer: Tracer, run: _Run, allowed: list[str]
    ) -> None:
        plan = run.plan
        assert plan is not None
        results = run.results
        steps = {step.id: step for step in plan.steps}
        sorter = graphlib.TopologicalSorter({s.id: s.depends_on for s in plan.steps})
        sorter.prepare()
        limiter = anyio.CapacityLimiter(self._limits.max_parallel_steps)
        send, receive = anyio.create_memory_object_stream[tuple[str, _StepOutcome]](math.inf)
        failure: _StepFailed | None = None
        stopped: RunStoppedError | None = None
        waiting: list[ApprovalRequest] = []

        async def run_step(step: PlanStep) -> None:
            async with limiter:
                output: _StepOutcome = None
                if not waiting:  # once a step waits for a human, no other one starts
                    try:
                        # One unit of work per step: its start and end events and span commit
                        # with its loop's writes (the loop still commits before each tool acts
                        # and after each turn's results), and so does the plan's checkpoint
                        # holding its result: a step whose end is stored never runs again.
                        async with context.unit_of_work():
                            output = await self._run_step(
                                context, tracer, run, step, steps, allowed
                            )
                            results[step.id] = output
                            await self._save(context, run, "executing")
                    except RunError as exc:
                        output = exc
                    except TurnSuspended as suspended:
                        output = _StepSuspended(suspended.requests)
            send.send_nowait((step.id, output))

        with send, receive:
            async with anyio.create_task_group() as group:
                in_flight = 0
                while sorter.is_active():
                    for step_id in sorter.get_ready() if not waiting else ():
                        if step_id in results:  # done before a restart: reuse the result
                            sorter.done(step_id)
                        else:
                            group.start_soon(run_step, steps[step_id])
                            in_flight += 1
                    if in_flight == 0:
                        if waiting:  # every running step finished or waits too
                            break
                        continue
                    step_id, outcome = await receive.receive()
                    in_flight -= 1
                    if isinstance(outcome, RunStoppedError):
                        # The run must end (the task's budget is spent, say): no replan, no
                        # fallback.
                        stopped = outcome
                        group.cancel_scope.cancel()
                        break
                    if isinstance(outcome, RunError):
                        # A failure replans: requests of steps waiting meanwhile are dropped
                        # with their loops (never recorded, nobody is asked about them).
                        failure = _StepFailed(step_id, outcome)
                        group.cancel_scope.cancel()
                        break
                    if isinstance(outcome, _StepSuspended):
                        waiting.extend(outcome.requests)
                        continue
                    if outcome is None:
                        continue
                    sorter.done(step_id)  # its result was saved with the step (``run_step``)
        if stopped is not None:
            raise stopped
        if failure is not None:
            raise failure
        if waiting:
            # The results saved so far stay; the usage up to here is saved with them.
            await self._save(context, run, "executing")
            raise ApprovalPendingError(waiting)

    async def _run_step(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        run: _Run,
        step: PlanStep,
        steps: dict[str, PlanStep],
        allowed: list[str],
    ) -> str:
        await context.emit(PlanStepStarted, step_id=step.id, goal=step.goal)
        async with tracer.span(
            "step",
            step.id,
            parent_span_id=context.task.parent_span_id,
            suspends_on=(TurnSuspended,),
        ) as span:
            span.attributes["depends_on"] = step.depends_on
            if tracer.content:
                span.attributes["goal"] = tracer.text(step.goal)
            messages: list[ChatMessage] = [
                SystemMessage(
                    content=with_task_instructions(self._step_system, context.task.instructions)
                    + f"\n\n{UNTRUSTED_NOTICE}"
                ),
                UserMessage(
                    content=self._step_prompt(context, step, steps, run.results, run.prior)
                ),
            ]
            try:
                result = await self._run_loop(
                    context,
                    run,
                    f"{run.revision}:{step.id}",
                    messages,
                    max_turns=self._limits.step_max_turns,
                    allowed=allowed,
                    parent_span_id=span.span_id,
                )
            except RunError as exc:
                await context.emit(
                    PlanStepCompleted, step_id=step.id, succeeded=False, error=str(exc)
                )
                raise
            span.attributes["output_chars"] = len(result.output)
        await context.emit(PlanStepCompleted, step_id=step.id, succeeded=True, output=result.output)
        return result.output

    def _cut(self, limit: int) -> Callable[[str], str]:
        """A step's result cut to ``limit`` for a prompt, as the loop cuts a tool result."""
        return lambda text: self._loop.cut_observation(text, limit)

    def _step_prompt(
        self,
        context: ExecutionContext,
        step: PlanStep,
        steps: dict[str, PlanStep],
        results: dict[str, str],
        prior: str,
    ) -> str:
        limit = self._limits.result_chars_per_step
        lines = [
            f"{STEP_MARKER} ({step.id}): {step.goal}",
            f"Overall task: {context.task.request.task}",
        ]
        if step.success_criterion:
            lines.append(f"Done when: {step.success_criterion}")
        if step.tool_hints:
            lines.append(f"Suggested tools: {', '.join(step.tool_hints)}")
        if step.depends_on:
            lines.append("Results of the steps this one depends on:")
            lines.extend(
                f"- {dep} ({steps[dep].goal}): {self._loop.cut_observation(results[dep], limit)}"
                for dep in step.depends_on
            )
        if prior:
            lines.append(f"Done in an earlier attempt:\n{prior}")
        return "\n".join(lines)

    async def _synthesize(self, context: ExecutionContext, run: _Run) -> ExecutionOutcome:
        await self._save(context, run, "synthesizing")
        cut = self._cut(self._limits.result_chars_per_step)
        summary = _progress(run.plan, run.results, run.prior, cut)
        messages: list[ChatMessage] = [
            SystemMessage(
                content=with_task_instructions(self._synthesis_system, context.task.instructions)
                + f"\n\n{UNTRUSTED_NOTICE}"
            ),
            UserMessage(
                content=f"{SYNTHESIS_MARKER} to this task: {context.task.request.task}\n\n"
                f"Results of the steps:\n{summary}"
            ),
        ]
        if context.task.output_type is not None:
            with_schema(messages, context.task.output_type)
        result = await self._run_loop(
            context,
            run,
            "synthesis",
            messages,
            max_turns=3,
            allowed=[],
            parent_span_id=context.task.parent_span_id,
            output_type=context.task.output_type,
        )
        context.run.messages.extend(messages[1:])
        return ExecutionOutcome(output=result.output, structured=result.structured)

    async def _fall_back(
        self, context: ExecutionContext, allowed: list[str], run: _Run
    ) -> ExecutionOutcome:
        failures = run.failures
        reason = failures[-1] if failures else "the run was resumed in its fallback"
        await self._save(context, run, "falling_back")
        await context.emit(
            StrategyFallback, from_strategy="plan_execute", to_strategy="react", reason=reason
        )
        tracer = Tracer.of(self._trace_store, context.task)
        messages = list(context.run.messages)
        done = run.prior or "\n".join(f"- {k}: {v}" for k, v in run.results.items())
        if done:
            messages.append(UserMessage(content=f"Progress from an earlier attempt:\n{done}"))
        if context.task.output_type is not None:
            with_schema(messages, context.task.output_type)
        async with tracer.span(
            "planning", "fallback_react", parent_span_id=context.task.parent_span_id
        ) as span:
            # A failure quotes the planner's reply or a provider's error (which may quote
            # the prompt): content; without it, how many there were.
            if tracer.content:
                span.attributes.update(reason=reason, failures=failures)
            else:
                span.attributes["failures"] = len(failures)
            try:
                result = await self._run_loop(
                    context,
                    run,
                    "fallback",
                    messages,
                    max_turns=self._limits.fallback_max_turns,
                    allowed=allowed,
                    parent_span_id=span.span_id,
                    output_type=context.task.output_type,
                )
            except TurnSuspended as suspended:
                # Its journal holds the turn; the run resumes here ("falling_back"), with the
                # usage up to here (limits count on from it).
                await self._save(context, run, "falling_back")
                raise ApprovalPendingError(suspended.requests) from None
            except (StructuredOutputError, RunStoppedError):
                raise
            except RunError as exc:
                failures.append(f"fallback ReAct failed: {type(exc).__name__}: {exc}")
                span.error = failures[-1]
                return ExecutionOutcome(escalation=_escalation(context, failures))
        context.run.messages[:] = messages
        return ExecutionOutcome(output=result.output, structured=result.structured)


def _progress(
    plan: Plan | None, results: dict[str, str], prior: str, cut: Callable[[str], str]
) -> str:
    lines = [prior] if prior else []
    if plan is not None:
        goals = {step.id: step.goal for step in plan.steps}
        lines.extend(
            f"- {step_id} ({goals.get(step_id, '')}): {cut(output)}"
            for step_id, output in results.items()
        )
    return "\n".join(lines)


def _escalation(context: ExecutionContext, failures: list[str]) -> Escalation:
    listed = "\n".join(f"- {failure}" for failure in failures)
    return Escalation(
        question=(
            f"The task {context.task.request.task!r} failed repeatedly:\n{listed}\n"
            "Approve to retry with your guidance (give it as the decision's reason), or deny "
            "to end the task."
        ),
        reason="plan-and-execute and the ReAct fallback both failed",
    )


_N = TypeVar("_N", int, float)


def _larger_usage(current: TokenUsage, saved: TokenUsage) -> TokenUsage:
    """The usage that counts more, field by field (both only ever grow during a task)."""
    return TokenUsage(
        input_tokens=max(current.input_tokens, saved.input_tokens),
        output_tokens=max(current.output_tokens, saved.output_tokens),
        cost_usd=_larger(current.cost_usd, saved.cost_usd),
        cache_read_tokens=_larger(current.cache_read_tokens, saved.cache_read_tokens),
        reasoning_tokens=_larger(current.reasoning_tokens, saved.reasoning_tokens),
    )


def _larger(current: _N | None, saved: _N | None) -> _N | None:
    return max((value for value in (current, saved) if value is not None), default=None)
