"""Asking the model for a plan graph, and refusing plans that cannot run."""

from __future__ import annotations

import graphlib
import json
from collections.abc import Sequence

from pydantic import ValidationError

from core_agent.contracts.errors import PlanningError, validation_problems
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.llm_gateway import TOKEN_LIMIT_FINISH_REASONS, ILLMGateway, LLMRequest
from core_agent.contracts.planner import IPlanner, Plan
from core_agent.contracts.tool import ToolSpec
from core_agent.contracts.trace_store import ITraceStore
from core_agent.observability.tracer import Tracer
from core_agent.orchestration.model_call import traced_model_call
from core_agent.orchestration.structured_output import OutputParseError, parse_model_output
from core_agent.prompts import PromptSet, default_prompts
from core_agent.prompts.task_instructions import with_task_instructions
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    UserMessage,
)

PLAN_REQUEST_MARKER = "Plan this task:"
"""Opens the planner's user message (scripted models and tests match on it)."""


def check_plan(plan: Plan, *, max_steps: int) -> list[str]:
    """Why ``plan`` cannot run (empty list when it can)."""
    problems: list[str] = []
    ids = [step.id for step in plan.steps]
    if len(ids) > max_steps:
        problems.append(f"the plan has {len(ids)} steps; at most {max_steps} are allowed")
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(f"duplicate step ids: {', '.join(duplicates)}")
    known = set(ids)
    for step in plan.steps:
        unknown = [d for d in step.depends_on if d not in known]
        if unknown:
            problems.append(f"step {step.id!r} depends on unknown steps: {', '.join(unknown)}")
        if step.id in step.depends_on:
            problems.append(f"step {step.id!r} depends on itself")
    if not problems:
        try:
            graphlib.TopologicalSorter({s.id: s.depends_on for s in plan.steps}).prepare()
        except graphlib.CycleError as exc:
            cycle = " -> ".join(str(node) for node in exc.args[1])
            problems.append(f"the dependencies form a cycle: {cycle}")
    return problems


class LLMPlanner(IPlanner):
    """Plans with a model call; an invalid plan is shown back with the reason, boundedly.

    Its system prompt is the ``planner`` prompt of ``prompts`` (the shipped set when ``None``).
    """

    def __init__(
        self,
        llm: ILLMGateway,
        trace_store: ITraceStore,
        *,
        max_attempts: int = 3,
        max_steps: int = 8,
        temperature: float | None = None,
        max_tokens: int | None = None,
        prompts: PromptSet | None = None,
    ) -> None:
        self._llm = llm
        self._system_prompt = (prompts if prompts is not None else default_prompts()).render(
            "planner", max_steps=max_steps
        )
        self._trace_store = trace_store
        self._max_attempts = max_attempts
        self._max_steps = max_steps
        self._temperature = temperature
        self._max_tokens = max_tokens

    async def plan(
        self,
        context: ExecutionContext,
        available_tools: Sequence[ToolSpec],
        feedback: str | None = None,
    ) -> Plan:
        """A valid plan for ``context.task.request``, or ``PlanningError`` with every refusal."""
        tools = "\n".join(f"- {t.name}: {t.description}" for t in available_tools) or "(none)"
        prompt = f"{PLAN_REQUEST_MARKER}\n{context.task.request.task}\n\nAvailable tools:\n{tools}"
        if feedback:
            prompt += f"\n\nEarlier attempt:\n{feedback}\nPlan only the work that remains."
        messages: list[ChatMessage] = [
            SystemMessage(
                content=with_task_instructions(self._system_prompt, context.task.instructions)
            ),
            UserMessage(content=prompt),
        ]
        tracer = Tracer.of(self._trace_store, context.task)
        tool_names = {t.name for t in available_tools}
        refusals: list[str] = []
        for attempt in range(1, self._max_attempts + 1):
            text, cut = await self._ask(context, tracer, messages, attempt)
            if cut:
                # Repairing the JSON would close it after the last whole step: a plan that
                # silently leaves out the rest.
                problems = [
                    "it was cut off by the output token limit; write a shorter plan "
                    "(fewer steps, shorter goals)"
                ]
            else:
                try:
                    plan = parse_model_output(text, Plan)
                    problems = check_plan(plan, max_steps=self._max_steps)
                except (OutputParseError, ValidationError) as exc:
                    why = validation_problems(exc) if isinstance(exc, ValidationError) else exc
                    problems = [f"not a valid plan object: {why}"]
            if not problems:
                return _without_unknown_hints(plan, tool_names)
            refusal = "; ".join(problems)
            refusals.append(f"attempt {attempt}: {refusal}")
            messages.append(AssistantMessage(content=text))
            messages.append(
                UserMessage(
                    content=f"That plan cannot be used: {refusal}. Reply with a corrected "
                    "plan as a JSON object only."
                )
            )
        raise PlanningError(
            f"no valid plan after {self._max_attempts} attempts ({' | '.join(refusals)})",
            attempts=refusals,
        )

    async def _ask(
        self, context: ExecutionContext, tracer: Tracer, messages: list[ChatMessage], attempt: int
    ) -> tuple[str, bool]:
        """The model's plan as text, and whether its output token limit cut it off."""
        response = await traced_model_call(
            self._llm,
            LLMRequest(
                messages=tuple(messages),
                temperature=self._temperature,
                max_tokens=self._max_tokens,
            ),
            context,
            tracer,
            parent_span_id=context.task.parent_span_id,
            stream=False,
            attributes={"purpose": "plan", "attempt": attempt},
        )
        text = response.message.content or json.dumps(
            [c.arguments for c in response.message.tool_calls]
        )
        return text, response.finish_reason in TOKEN_LIMIT_FINISH_REASONS


def _without_unknown_hints(plan: Plan, tool_names: set[str]) -> Plan:
    # A hint is advice, not a contract: an unknown one is dropped rather than failing the plan.
    return Plan(
        steps=[
            step.model_copy(update={"tool_hints": [h for h in step.tool_hints if h in tool_names]})
            for step in plan.steps
        ]
    )
