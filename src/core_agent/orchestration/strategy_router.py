"""Choosing ReAct or plan-and-execute per task, from explainable features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core_agent.contracts.strategy_router import IStrategyRouter, RoutingDecision
from core_agent.contracts.tool import ToolSpec
from core_agent.orchestration.model_classifier import ModelAssistedClassifier
from core_agent.orchestration.task_classifier import TaskClassifier, TaskFeatures
from shared.agent_protocol import StrategyMode, TaskRequest

RouterMode = Literal["adaptive", "react", "plan_execute"]


@dataclass(frozen=True, slots=True)
class RoutingThresholds:
    """When a task is worth planning. Defaults suit short instructions typed by a person."""

    min_sub_goals: int = 3
    """This many independent instructions are planned even without explicit ordering."""
    min_dependent_sub_goals: int = 2
    """This many instructions are planned when one feeds another ("then", "based on that")."""
    min_list_items: int = 2
    """A numbered or bulleted list of this many steps is a plan already."""
    long_context_tokens: int = 600
    """Past this length, two instructions are enough to plan."""


class AdaptiveStrategyRouter(IStrategyRouter):
    """Routes by ``TaskFeatures`` and thresholds; configuration or the request may force it."""

    def __init__(
        self,
        classifier: TaskClassifier | None = None,
        *,
        mode: RouterMode = "adaptive",
        thresholds: RoutingThresholds | None = None,
        model_classifier: ModelAssistedClassifier | None = None,
    ) -> None:
        self._classifier = classifier or TaskClassifier()
        self._mode = mode
        self._thresholds = thresholds or RoutingThresholds()
        self._model_classifier = model_classifier

    async def route(
        self, request: TaskRequest, available_tools: Sequence[ToolSpec]
    ) -> RoutingDecision:
        """Decide for ``request``; with a model classifier, its verdict adjusts the features."""
        forced = request.force_mode is not None or self._mode != "adaptive"
        if self._model_classifier is None or forced:
            return self.decide(request, available_tools)
        features, note = await self._model_classifier.classify_with_model(
            request.task, available_tools
        )
        strategy, reason = self._choose(features)
        return RoutingDecision(strategy, reason, {**features.to_dict(), **note})

    def decide(self, request: TaskRequest, available_tools: Sequence[ToolSpec]) -> RoutingDecision:
        """The deterministic decision, synchronously (no model call)."""
        features = self._classifier.classify(request.task, available_tools)
        if request.force_mode is not None:
            return RoutingDecision(
                request.force_mode,
                f"forced by the request (force_mode={request.force_mode})",
                features.to_dict(),
                forced=True,
            )
        if self._mode != "adaptive":
            return RoutingDecision(
                self._mode,
                f"forced by configuration ({self._mode}: AGENT_STRATEGY_MODE, or strategy.mode of "
                "an agent file)",
                features.to_dict(),
                forced=True,
            )
        strategy, reason = self._choose(features)
        return RoutingDecision(strategy, reason, features.to_dict())

    def _choose(self, f: TaskFeatures) -> tuple[StrategyMode, str]:
        t = self._thresholds
        if f.list_items >= t.min_list_items:
            return "plan_execute", f"the task lists {f.list_items} steps"
        if f.sub_goals >= t.min_sub_goals:
            return "plan_execute", (f"{f.sub_goals} sub-goals (threshold {t.min_sub_goals})")
        if f.sub_goals >= t.min_dependent_sub_goals and f.dependencies > 0:
            return "plan_execute", (
                f"{f.sub_goals} sub-goals with {f.dependencies} dependency marker(s) between them"
            )
        if f.sub_goals >= 2 and f.context_tokens >= t.long_context_tokens:
            return "plan_execute", (
                f"{f.sub_goals} sub-goals in a long task ({f.context_tokens} tokens)"
            )
        goals = "a single goal" if f.sub_goals == 1 else f"{f.sub_goals} independent goals"
        return "react", f"{goals} with no ordering between steps; ReAct is cheaper"
