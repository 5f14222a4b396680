"""Port that grades a tool call's risk."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core_agent.contracts.tool import ToolAssessment, ToolSpec
from shared.agent_protocol import RiskLevel


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The risk of one call, the rule that set it, and whether the call is denied outright.

    ``allow_network``: the rule that graded the call lets it use the network (a command's
    confinement then leaves the network open). ``unproven``: what in the call's command
    arguments the shell parser could not read statically, when the tool did not judge them
    itself; such a call needs a human whatever its risk.
    """

    risk: RiskLevel
    rule: str
    denied: bool = False
    reason: str = ""
    allow_network: bool = False
    unproven: tuple[str, ...] = ()


class IPolicyEngine(abc.ABC):
    """Grades calls from declarative rules; deny rules win over allow rules. Never blocks."""

    @abc.abstractmethod
    def evaluate(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        *,
        tainted: bool = False,
        assessment: ToolAssessment | None = None,
    ) -> PolicyDecision:
        """Grade one call.

        Args:
            spec: The tool's spec (name and capabilities).
            arguments: The arguments the model sent (validated).
            tainted: Whether untrusted content is already in the task's context.
            assessment: The tool's own static judgement of the call: a refusal denies it;
                its risk grades the call when no rule does.
        """

    def concerns_path(self, path: str) -> bool:
        """Whether some rule's paths may match ``path`` (as ``SandboxVerdict.path`` gives it).

        ``False`` lets a caller skip grading a file that only a path rule could grade apart
        from the call that reaches it (a walk screens every file below its directory). The
        default, ``True``, is always safe; an engine with path rules answers faster.
        """
        return True
