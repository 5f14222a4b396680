"""Port that grades a tool call's risk."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core_agent.contracts.tool import ToolSpec
from shared.agent_protocol import RiskLevel


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The risk of one call, the rule that set it, and whether the call is denied outright."""

    risk: RiskLevel
    rule: str
    denied: bool = False
    reason: str = ""


class IPolicyEngine(abc.ABC):
    """Grades calls from declarative rules; deny rules win over allow rules. Never blocks."""

    @abc.abstractmethod
    def evaluate(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, tainted: bool = False
    ) -> PolicyDecision:
        """Grade one call.

        Args:
            spec: The tool's spec (name and capabilities).
            arguments: Validated arguments.
            tainted: Whether untrusted content is already in the task's context.
        """
