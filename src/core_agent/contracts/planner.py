"""Port that turns a task into a plan graph."""

from __future__ import annotations

import abc

from pydantic import BaseModel, Field

from shared.agent_protocol import TaskRequest


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
        self, request: TaskRequest, available_tools: list[str], feedback: str | None = None
    ) -> Plan:
        """Produce a plan for ``request``.

        Args:
            request: The task.
            available_tools: Tools the steps may name as hints.
            feedback: Why the previous plan failed, when replanning.

        Raises:
            RunError: No valid plan (cycle, unknown dependency, empty) within the retry bound.
        """
