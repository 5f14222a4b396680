"""What the kernel would do with one tool call, without running it.

Used by ``core-agent policy check`` to debug policy files, and to run safety suites. It goes
through the same judgement as a real run (``safety.call_judgement``: the tool's own static
check, then the policy rules), so the verdict is the run's: argument validation, the tool's
refusal or doubts (a command's parse, the calculator's expression check), the risk, the rule,
whether a human must approve, the permit the call would get, and the sandbox's verdict on
every path and URL in the arguments and on whether commands can be confined here at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core_agent.contracts.errors import ToolArgumentsError
from core_agent.contracts.policy_engine import IPolicyEngine
from core_agent.contracts.tool import Capability, ToolAssessment, ToolContext
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.contracts.tool_sandbox import IToolSandbox
from core_agent.safety.call_judgement import judge_call
from core_agent.safety.policy_engine import PATH_ARGUMENTS, URL_ARGUMENTS
from shared.agent_protocol import RiskLevel

CHECK_IDS = "policy-check"


async def check_call(
    *,
    tools: IToolRegistry,
    policy: IPolicyEngine,
    sandbox: IToolSandbox,
    threshold: RiskLevel,
    tool: str,
    arguments: Mapping[str, Any],
    tainted: bool = False,
) -> dict[str, Any]:
    """The verdict as JSON data (see the module docstring).

    Raises:
        ToolNotFoundError: No such tool (the message lists the registered ones).
    """
    registered = tools.get(tool)
    spec = registered.spec
    report: dict[str, Any] = {"tool": tool, "arguments": dict(arguments), "tainted": tainted}
    context = ToolContext(
        task_id=CHECK_IDS, session_id=CHECK_IDS, call_id=CHECK_IDS, sandbox=sandbox, tainted=tainted
    )
    try:
        validated = registered.validate_arguments(arguments)
        report["valid"] = True
    except ToolArgumentsError as exc:
        report["valid"] = False
        report["validation_error"] = str(exc)
        validated = None
    if validated is not None:
        judgement = judge_call(
            policy, registered, arguments, validated, context, tainted=tainted, threshold=threshold
        )
        decision, assessment = judgement.decision, judgement.assessment
        approval_required = judgement.approval_required
        permit = judgement.approved_permit if approval_required else judgement.permit
    else:
        decision, assessment = policy.evaluate(spec, arguments, tainted=tainted), ToolAssessment()
        approval_required = not decision.denied and decision.risk.at_least(threshold)
        permit = None
    report.update(
        risk=decision.risk.value,
        rule=decision.rule,
        denied=decision.denied,
        reason=decision.reason,
        approval_threshold=threshold.value,
        approval_required=approval_required,
        tool_check={
            "refusal": assessment.refusal,
            "unproven": list(assessment.unproven),
            "writes": assessment.writes,
            "paths": list(assessment.paths),
            **dict(assessment.details),
        },
        permit=(
            None
            if permit is None
            else {"write": permit.write, "network": permit.network, "approved": permit.approved}
        ),
    )
    checks = await _sandbox_checks(sandbox, spec.capabilities, arguments)
    if Capability.EXEC in spec.capabilities:
        problem = await sandbox.command_readiness()
        checks.append(
            {
                "argument": None,
                "kind": "confinement",
                "value": sandbox.confinement,
                "allowed": problem is None,
                "reason": problem or "",
            }
        )
    refused = [check for check in checks if not check["allowed"]]
    report["sandbox"] = {
        "allowed": not refused,
        "reason": refused[0]["reason"] if refused else "",
        "checks": checks,
    }
    report["would_run"] = (
        report["valid"] and not decision.denied and not refused and not approval_required
    )
    return report


async def _sandbox_checks(
    sandbox: IToolSandbox, capabilities: frozenset[Capability], arguments: Mapping[str, Any]
) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    writes = Capability.WRITE in capabilities
    for name, value in arguments.items():
        if isinstance(value, str):
            values = [value]
        elif isinstance(value, list):
            values = [item for item in value if isinstance(item, str)]
        else:
            continue
        key = name.lower()
        for text in values:
            if key in URL_ARGUMENTS:
                verdict = await sandbox.check_url(text)
                kind = "url"
            elif key in PATH_ARGUMENTS:
                capability = Capability.WRITE if writes else Capability.READ
                verdict = sandbox.check_path(text, capability)
                kind = f"path ({capability.value})"
            else:
                continue
            checks.append(
                {
                    "argument": name,
                    "kind": kind,
                    "value": text,
                    "allowed": verdict.allowed,
                    "reason": verdict.reason,
                }
            )
    return checks
