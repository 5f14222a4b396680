"""Port that decides how a task runs: ReAct or plan-and-execute."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core_agent.contracts.tool import ToolSpec
from shared.agent_protocol import StrategyMode, TaskRequest


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    """The chosen strategy with the features that led to it, for traces and tuning."""

    strategy: StrategyMode
    reason: str
    features: dict[str, Any] = field(default_factory=dict)
    forced: bool = False


class IStrategyRouter(abc.ABC):
    """Chooses a strategy per task; explainable and cheap (no model call by default)."""

    @abc.abstractmethod
    async def route(
        self, request: TaskRequest, available_tools: Sequence[ToolSpec]
    ) -> RoutingDecision:
        """Pick ``react`` or ``plan_execute`` for ``request``.

        Args:
            request: The task; ``request.force_mode`` always wins.
            available_tools: Specs of the tools the task may use (their count, and the risk
                of those it likely needs, are features).

        Returns:
            The strategy, a human-readable reason and the features behind it. Never raises for
            a valid request; an optional model-based classifier that fails falls back to the
            deterministic features.
        """
