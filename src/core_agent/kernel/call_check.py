"""What the kernel would do with one tool call, without running it.

Used by ``core-agent policy check`` to debug policy files, and to run safety suites: the
answer combines argument validation, the policy decision (risk, rule, denial, whether a human
must approve) and the sandbox's verdict on every path, command and URL in the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core_agent.contracts.errors import ToolArgumentsError
from core_agent.contracts.policy_engine import IPolicyEngine
from core_agent.contracts.tool import Capability
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.contracts.tool_sandbox import IToolSandbox
from core_agent.safety.policy_engine import COMMAND_ARGUMENTS, PATH_ARGUMENTS, URL_ARGUMENTS
from shared.agent_protocol import RiskLevel


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
    spec = tools.get(tool).spec
    report: dict[str, Any] = {"tool": tool, "arguments": dict(arguments), "tainted": tainted}
    try:
        tools.get(tool).validate_arguments(arguments)
        report["valid"] = True
    except ToolArgumentsError as exc:
        report["valid"] = False
        report["validation_error"] = str(exc)
    decision = policy.evaluate(spec, arguments, tainted=tainted)
    report.update(
        risk=decision.risk.value,
        rule=decision.rule,
        denied=decision.denied,
        reason=decision.reason,
        approval_threshold=threshold.value,
        approval_required=not decision.denied and decision.risk.at_least(threshold),
    )
    checks = await _sandbox_checks(sandbox, spec.capabilities, arguments)
    refused = [check for check in checks if not check["allowed"]]
    report["sandbox"] = {
        "allowed": not refused,
        "reason": refused[0]["reason"] if refused else "",
        "checks": checks,
    }
    report["would_run"] = (
        report["valid"] and not decision.denied and not refused and not report["approval_required"]
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
            if key in COMMAND_ARGUMENTS:
                verdict = sandbox.check_command(text)
                kind = "command"
            elif key in URL_ARGUMENTS:
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
