"""One judgement of a tool call, shared by the real run and ``core-agent policy check``.

The tool's own static check (``ITool.assess``) and the policy rules are combined here, once,
so what ``policy check`` reports is what the kernel does: the same refusal, the same risk,
the same need for a human, the same permit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from core_agent.contracts.policy_engine import IPolicyEngine, PolicyDecision
from core_agent.contracts.tool import (
    CallPermit,
    ITool,
    ToolAssessment,
    ToolContext,
    WithheldFile,
)
from shared.agent_protocol import RiskLevel


@dataclass(frozen=True, slots=True)
class CallJudgement:
    """What the kernel does with a call before it runs.

    ``permit`` is what the call may do if it runs without a human; an approval widens it
    to workspace writes (``approved_permit``).
    """

    decision: PolicyDecision
    assessment: ToolAssessment
    approval_required: bool
    permit: CallPermit

    @property
    def approved_permit(self) -> CallPermit:
        """The permit after a human approved the call."""
        return replace(self.permit, write=True, approved=True)


def judge_call(
    policy: IPolicyEngine,
    tool: ITool,
    arguments: Mapping[str, Any],
    validated: Mapping[str, Any],
    context: ToolContext,
    *,
    tainted: bool,
    threshold: RiskLevel,
) -> CallJudgement:
    """Assess, grade and decide.

    A call the tool cannot vouch for (``assessment.unproven``) is graded at least at the
    approval threshold, whatever the rules say: a rule can make a call riskier, never make
    an unreadable command safe.

    Args:
        policy: The rules.
        tool: The tool called.
        arguments: The arguments as the model sent them (what rules match).
        validated: ``tool.validate_arguments(arguments)`` (what the tool assesses).
        context: The call's context (its sandbox is what the tool assesses against).
        tainted: Whether untrusted content is in the task's context.
        threshold: The risk at and above which a human must approve.
    """
    assessment = tool.assess(validated, context)
    decision = policy.evaluate(tool.spec, arguments, tainted=tainted, assessment=assessment)
    unproven = assessment.unproven or decision.unproven
    if not decision.denied and unproven:
        doubts = "; ".join(unproven[:5])
        if not decision.risk.at_least(threshold):
            decision = replace(
                decision,
                risk=threshold,
                reason=f"{decision.reason}; raised to {threshold.value}: cannot be proven "
                f"harmless ({doubts})",
            )
        else:
            decision = replace(decision, reason=f"{decision.reason}; unproven: {doubts}")
    approval_required = not decision.denied and decision.risk.at_least(threshold)
    withheld = None
    if any(path.endswith("/") for path in assessment.paths):
        withheld = _screen(
            policy, tool, arguments, assessment, decision, tainted=tainted, threshold=threshold
        )
    permit = CallPermit(write=assessment.writes, network=decision.allow_network, withheld=withheld)
    if decision.unproven and not assessment.unproven:
        assessment = replace(assessment, unproven=decision.unproven)
    return CallJudgement(decision, assessment, approval_required, permit)


def _screen(
    policy: IPolicyEngine,
    tool: ITool,
    arguments: Mapping[str, Any],
    assessment: ToolAssessment,
    decision: PolicyDecision,
    *,
    tainted: bool,
    threshold: RiskLevel,
) -> Callable[[str], WithheldFile | None]:
    """``CallPermit.withheld`` for a walk graded ``decision``.

    The walk was graded by its directory; each file below is graded as if the call named it
    alone (the same arguments and the tool's own grade, that one path): a file no path rule
    concerns keeps the call's grade, so only what a rule grades higher is withheld (``grep
    -r`` over a workspace holding ``.env``). Approving the walk does not hand over those
    files: whoever approved saw a directory, not them.
    """
    spec = tool.spec

    def withheld(path: str) -> WithheldFile | None:
        if not policy.concerns_path(path):
            return None  # graded as the call is: what no path rule concerns is the call's
        alone = policy.evaluate(
            spec, arguments, tainted=tainted, assessment=replace(assessment, paths=(path,))
        )
        if alone.denied:
            return WithheldFile(denied=True, reason=f"denied by rule {alone.rule}")
        if alone.risk.rank > decision.risk.rank and alone.risk.at_least(threshold):
            return WithheldFile(denied=False, reason=f"{alone.risk.value} risk by {alone.rule}")
        return None

    return withheld
