"""Port that turns a task into a plan graph."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from pydantic import BaseModel, Field

from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.tool import ToolSpec


class PlanStep(BaseModel):
    """One step of a plan: what to do, what it needs first, and how to tell it is done."""

    id: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    depends_on: list[str] = Field(default_factory=list)
    tool_hints: list[str] = Field(default_factory=list)
    success_criterion: str = ""


class Plan(BaseModel):
    """A directed acyclic graph of steps."""

    steps: list[PlanStep] = Field(min_length=1)


class IPlanner(abc.ABC):
    """Asks a model for a plan and returns only valid ones."""

    @abc.abstractmethod
    async def plan(
        self,
        context: ExecutionContext,
        available_tools: Sequence[ToolSpec],
        feedback: str | None = None,
    ) -> Plan:
        """Produce a valid plan for the task in ``context``.

        A plan is valid when it has at least one step, unique step ids, dependencies that name
        existing steps, and no cycle. An invalid answer is shown back to the model with the
        reason, a bounded number of times. Model calls are traced and counted in
        ``context.stats``.

        Args:
            context: The running task (its request, trace and stats).
            available_tools: Tools the steps may name as hints.
            feedback: Why the previous plan failed and what is already done, when replanning.

        Raises:
            PlanningError: No valid plan within the retry bound; ``attempts`` says why.
            ModelError: The model call itself failed.
        """
