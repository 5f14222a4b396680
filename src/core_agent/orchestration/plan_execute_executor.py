"""Plan-and-execute: plan a graph of steps, run ready steps concurrently, then answer.

Steps run in layers computed by ``graphlib.TopologicalSorter``: every step whose
dependencies are done starts at once (bounded by ``max_parallel_steps``), each as a constrained
ReAct loop whose result is handed to its dependents. After each step a checkpoint records the
plan and the results so far. A failed step triggers a replan of the remaining work (bounded);
if planning or execution still fails, the task falls back to a constrained ReAct loop over the
whole task; if that fails too, the run stops with a question for a human.
"""

from __future__ import annotations

import dataclasses
import graphlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.errors import PlanningError, RunError, StructuredOutputError
from core_agent.contracts.executor import (
    Escalation,
    ExecutionContext,
    ExecutionOutcome,
    IExecutor,
)
from core_agent.contracts.planner import IPlanner, Plan, PlanStep
from core_agent.contracts.tool import ToolSpec
from core_agent.contracts.trace_store import ITraceStore
from core_agent.observability.tracer import Tracer
from core_agent.orchestration.react_loop import ReActLoop, truncate_observation
from core_agent.orchestration.structured_output import with_schema
from shared.agent_protocol import (
    ChatMessage,
    PlanCreated,
    PlanStepCompleted,
    PlanStepStarted,
    StrategyFallback,
    StrategyMode,
    SystemMessage,
    UserMessage,
)

CHECKPOINT_KEY = "plan_execute"

STEP_SYSTEM_PROMPT = """You carry out one step of a larger plan. Use the tools when they help.
Do only this step, then reply with its result: the facts, numbers or text the later steps
need, stated plainly."""

SYNTHESIS_SYSTEM_PROMPT = """You write the final answer to a task from the results of the
steps that were carried out for it. Answer the task directly and concisely; do not describe
the steps unless asked."""

STEP_MARKER = "Your step"
"""Opens a step's user message (scripted models and tests match on it)."""
SYNTHESIS_MARKER = "Write the final answer"
"""Opens the synthesis message."""


@dataclass(frozen=True, slots=True)
class PlanExecuteLimits:
    """Bounds of plan-and-execute."""

    max_parallel_steps: int = 3
    step_max_turns: int = 6
    max_replans: int = 1
    fallback_max_turns: int = 8
    result_chars_per_step: int = 4000


class _StepFailed(Exception):
    def __init__(self, step_id: str, error: RunError) -> None:
        self.step_id = step_id
        self.error = error
        super().__init__(f"step {step_id!r} failed: {type(error).__name__}: {error}")


class PlanExecuteExecutor(IExecutor):
    """Plans, runs the plan graph with bounded concurrency, replans, falls back, escalates."""

    def __init__(
        self,
        *,
        planner: IPlanner,
        loop: ReActLoop,
        trace_store: ITraceStore,
        checkpoints: ICheckpointStore,
        limits: PlanExecuteLimits | None = None,
    ) -> None:
        self._planner = planner
        self._loop = loop
        self._trace_store = trace_store
        self._checkpoints = checkpoints
        self._limits = limits or PlanExecuteLimits()

    @property
    def strategy(self) -> StrategyMode:
        """Always ``plan_execute``."""
        return "plan_execute"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Plan, execute, replan, fall back, or escalate; see the module docstring."""
        tracer = Tracer(self._trace_store, trace_id=context.trace_id, task_id=context.task_id)
        allowed = self._allowed(context)
        specs = self._loop.tools.specs(allowed)
        saved = await self._checkpoints.load(context.task_id, CHECKPOINT_KEY)
        revision = 0
        results: dict[str, str] = {}
        prior = ""
        plan: Plan | None = None
        if saved is not None:  # resumed: finished steps are not run again
            plan = Plan.model_validate(saved["plan"])
            results = dict(saved["results"])
            revision = int(saved["revision"])
            prior = str(saved.get("prior", ""))
            context.tainted = context.tainted or bool(saved.get("tainted"))
        feedback = context.guidance
        if feedback and plan is not None:
            prior = f"{prior}\nGuidance from a human: {feedback}".strip()
        failures: list[str] = []
        replans = 0
        while True:
            try:
                if plan is None:
                    plan = await self._make_plan(context, tracer, specs, feedback, revision)
                await self._execute(context, tracer, plan, results, allowed, prior, revision)
                break
            except PlanningError as exc:
                failures.append(f"planning failed: {exc}")
                return await self._fall_back(context, allowed, failures, prior, results)
            except _StepFailed as exc:
                failures.append(str(exc))
                if replans >= self._limits.max_replans:
                    return await self._fall_back(context, allowed, failures, prior, results)
                prior = _progress(plan, results, prior, self._limits.result_chars_per_step)
                feedback = f"{exc}.\nAlready done:\n{prior or '(nothing)'}"
                plan, results, revision, replans = None, {}, revision + 1, replans + 1
        return await self._synthesize(context, plan, results, prior)

    def _allowed(self, context: ExecutionContext) -> list[str]:
        request = context.request
        return list(request.tools) if request.tools is not None else self._loop.tools.names()

    async def _make_plan(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        specs: Sequence[ToolSpec],
        feedback: str | None,
        revision: int,
    ) -> Plan:
        async with tracer.span("planning", "plan", parent_span_id=context.parent_span_id) as span:
            span.attributes["revision"] = revision
            if feedback:
                span.attributes["feedback"] = feedback[:2000]
            # The planner's model calls nest under this span; stats and events stay shared.
            planning_context = dataclasses.replace(context, parent_span_id=span.span_id)
            try:
                plan = await self._planner.plan(planning_context, specs, feedback)
            except PlanningError as exc:
                span.attributes["refusals"] = exc.attempts
                raise
            span.attributes["steps"] = [step.model_dump() for step in plan.steps]
        await context.emit(
            PlanCreated, revision=revision, steps=[step.model_dump() for step in plan.steps]
        )
        return plan

    async def _execute(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        plan: Plan,
        results: dict[str, str],
        allowed: list[str],
        prior: str,
        revision: int,
    ) -> None:
        steps = {step.id: step for step in plan.steps}
        sorter = graphlib.TopologicalSorter({s.id: s.depends_on for s in plan.steps})
        sorter.prepare()
        limiter = anyio.CapacityLimiter(self._limits.max_parallel_steps)
        send, receive = anyio.create_memory_object_stream[tuple[str, str | RunError]](math.inf)
        failure: _StepFailed | None = None

        async def run_step(step: PlanStep) -> None:
            async with limiter:
                try:
                    output: str | RunError = await self._run_step(
                        context, tracer, step, steps, results, allowed, prior
                    )
                except RunError as exc:
                    output = exc
            send.send_nowait((step.id, output))

        with send, receive:
            async with anyio.create_task_group() as group:
                in_flight = 0
                while sorter.is_active():
                    for step_id in sorter.get_ready():
                        if step_id in results:  # done before a restart: reuse the result
                            sorter.done(step_id)
                        else:
                            group.start_soon(run_step, steps[step_id])
                            in_flight += 1
                    if in_flight == 0:
                        continue
                    step_id, outcome = await receive.receive()
                    in_flight -= 1
                    if isinstance(outcome, RunError):
                        failure = _StepFailed(step_id, outcome)
                        group.cancel_scope.cancel()
                        break
                    results[step_id] = outcome
                    sorter.done(step_id)
                    await self._checkpoints.save(
                        context.task_id,
                        CHECKPOINT_KEY,
                        {
                            "plan": plan.model_dump(),
                            "results": results,
                            "revision": revision,
                            "prior": prior,
                            "tainted": context.tainted,
                        },
                    )
        if failure is not None:
            raise failure

    async def _run_step(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        step: PlanStep,
        steps: dict[str, PlanStep],
        results: dict[str, str],
        allowed: list[str],
        prior: str,
    ) -> str:
        await context.emit(PlanStepStarted, step_id=step.id, goal=step.goal)
        async with tracer.span("step", step.id, parent_span_id=context.parent_span_id) as span:
            span.attributes.update(goal=step.goal, depends_on=step.depends_on)
            messages: list[ChatMessage] = [
                SystemMessage(content=STEP_SYSTEM_PROMPT),
                UserMessage(content=self._step_prompt(context, step, steps, results, prior)),
            ]
            try:
                result = await self._loop.run(
                    context,
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
            f"Overall task: {context.request.task}",
        ]
        if step.success_criterion:
            lines.append(f"Done when: {step.success_criterion}")
        if step.tool_hints:
            lines.append(f"Suggested tools: {', '.join(step.tool_hints)}")
        if step.depends_on:
            lines.append("Results of the steps this one depends on:")
            lines.extend(
                f"- {dep} ({steps[dep].goal}): {truncate_observation(results[dep], limit)}"
                for dep in step.depends_on
            )
        if prior:
            lines.append(f"Done in an earlier attempt:\n{prior}")
        return "\n".join(lines)

    async def _synthesize(
        self, context: ExecutionContext, plan: Plan, results: dict[str, str], prior: str
    ) -> ExecutionOutcome:
        summary = _progress(plan, results, prior, self._limits.result_chars_per_step)
        messages: list[ChatMessage] = [
            SystemMessage(content=SYNTHESIS_SYSTEM_PROMPT),
            UserMessage(
                content=f"{SYNTHESIS_MARKER} to this task: {context.request.task}\n\n"
                f"Results of the steps:\n{summary}"
            ),
        ]
        if context.output_type is not None:
            with_schema(messages, context.output_type)
        result = await self._loop.run(
            context,
            messages,
            max_turns=3,
            allowed=[],
            parent_span_id=context.parent_span_id,
            output_type=context.output_type,
        )
        context.messages.extend(messages[1:])
        return ExecutionOutcome(output=result.output, structured=result.structured)

    async def _fall_back(
        self,
        context: ExecutionContext,
        allowed: list[str],
        failures: list[str],
        prior: str,
        results: dict[str, str],
    ) -> ExecutionOutcome:
        reason = failures[-1]
        await context.emit(
            StrategyFallback, from_strategy="plan_execute", to_strategy="react", reason=reason
        )
        tracer = Tracer(self._trace_store, trace_id=context.trace_id, task_id=context.task_id)
        messages = list(context.messages)
        done = prior or "\n".join(f"- {k}: {v}" for k, v in results.items())
        if done:
            messages.append(UserMessage(content=f"Progress from an earlier attempt:\n{done}"))
        if context.output_type is not None:
            with_schema(messages, context.output_type)
        async with tracer.span(
            "planning", "fallback_react", parent_span_id=context.parent_span_id
        ) as span:
            span.attributes.update(reason=reason, failures=failures)
            try:
                result = await self._loop.run(
                    context,
                    messages,
                    max_turns=self._limits.fallback_max_turns,
                    allowed=allowed,
                    parent_span_id=span.span_id,
                    output_type=context.output_type,
                )
            except StructuredOutputError:
                raise
            except RunError as exc:
                failures.append(f"fallback ReAct failed: {type(exc).__name__}: {exc}")
                span.error = failures[-1]
                return ExecutionOutcome(escalation=_escalation(context, failures))
        context.messages[:] = messages
        return ExecutionOutcome(output=result.output, structured=result.structured)


def _progress(plan: Plan | None, results: dict[str, str], prior: str, limit: int) -> str:
    lines = [prior] if prior else []
    if plan is not None:
        goals = {step.id: step.goal for step in plan.steps}
        lines.extend(
            f"- {step_id} ({goals.get(step_id, '')}): {truncate_observation(output, limit)}"
            for step_id, output in results.items()
        )
    return "\n".join(lines)


def _escalation(context: ExecutionContext, failures: list[str]) -> Escalation:
    listed = "\n".join(f"- {failure}" for failure in failures)
    return Escalation(
        question=(
            f"The task {context.request.task!r} failed repeatedly:\n{listed}\n"
            "Approve to retry with your guidance (give it as the decision's reason), or deny "
            "to end the task."
        ),
        reason="plan-and-execute and the ReAct fallback both failed",
    )
