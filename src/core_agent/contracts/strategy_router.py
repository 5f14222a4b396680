"""Port that decides how a task runs: ReAct or plan-and-execute."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

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
    async def route(self, request: TaskRequest, available_tools: list[str]) -> RoutingDecision:
        """Pick ``react`` or ``plan_execute`` for ``request``.

        ``request.force_mode`` always wins. Never raises for a valid request.
        """
