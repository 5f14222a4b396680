"""The checks between a validated tool call and its execution: policy, then approval.

Every call is graded by the policy engine; the decision is a ``policy`` span and a
``policy.decided`` event, with the rule that matched. A denied call is refused. A call at or
above the approval threshold runs only with a human's approval (or a standing grant from an
earlier scoped decision), and only if its arguments still hash to what the human was shown.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from core_agent.contracts.errors import (
    ApprovalDeniedError,
    ApprovalPendingError,
    PolicyDeniedError,
)
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.policy_engine import IPolicyEngine
from core_agent.contracts.tool import ToolSpec
from core_agent.observability.tracer import Tracer
from core_agent.safety.approvals import ApprovalGrants, call_hash
from shared.agent_protocol import ApprovalRequest, PolicyDecided, RiskLevel, ToolCall


class ToolCallGate:
    """Grades, refuses, or asks a human; raises a ``ToolError`` to stop the call."""

    def __init__(
        self,
        policy: IPolicyEngine,
        *,
        approval_threshold: RiskLevel = RiskLevel.HIGH,
        grants: ApprovalGrants | None = None,
    ) -> None:
        self._policy = policy
        self._threshold = approval_threshold
        self._grants = grants or ApprovalGrants()

    async def check(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        call: ToolCall,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        parent_span_id: str | None,
    ) -> None:
        """Return when the call may run; raise ``PolicyDeniedError`` or ``ApprovalDeniedError``."""
        started = datetime.now(UTC)
        decision = self._policy.evaluate(spec, arguments, tainted=context.tainted)
        needs_approval = not decision.denied and decision.risk.at_least(self._threshold)
        await tracer.record(
            "policy",
            spec.name,
            started_at=started,
            ended_at=datetime.now(UTC),
            parent_span_id=parent_span_id,
            attributes={
                "call_id": call.id,
                "risk": decision.risk.value,
                "rule": decision.rule,
                "denied": decision.denied,
                "approval_required": needs_approval,
                "tainted": context.tainted,
                "reason": decision.reason,
            },
        )
        await context.emit(
            PolicyDecided,
            call_id=call.id,
            tool=spec.name,
            risk=decision.risk,
            rule=decision.rule,
            denied=decision.denied,
            approval_required=needs_approval,
            reason=decision.reason,
            tainted=context.tainted,
        )
        if decision.denied:
            raise PolicyDeniedError(
                f"refused by policy rule {decision.rule!r}: {decision.reason}",
                tool_name=spec.name,
                rule=decision.rule,
            )
        if not needs_approval:
            return
        scope = {"task_id": context.task_id, "session_id": context.session_id, "tool": spec.name}
        if self._grants.covering(**scope, arguments=arguments) is not None:
            return
        resumed = context.resumed_approvals.get(call.id)
        if resumed is not None:
            # A human decided while the task was suspended; the shown call is the bound one.
            request, answer = resumed
        else:
            request = ApprovalRequest(
                request_id=uuid.uuid4().hex,
                task_id=context.task_id,
                session_id=context.session_id,
                tool_call=call,
                call_hash=call_hash(spec.name, arguments),
                risk=decision.risk,
                rule=decision.rule,
                reason=decision.reason,
                created_at=datetime.now(UTC),
            )
            if context.can_suspend:
                # Durable path: the executor checkpoints and the kernel asks (host or later).
                raise ApprovalPendingError([request])
            if context.request_approval is None:
                raise ApprovalDeniedError(
                    f"{spec.name} is {decision.risk.value} risk (rule {decision.rule!r}) and "
                    "needs a human's approval, but no approver is connected",
                    tool_name=spec.name,
                )
            async with tracer.span("approval", spec.name, parent_span_id=parent_span_id) as span:
                span.attributes.update(request_id=request.request_id, call_hash=request.call_hash)
                answer = await context.request_approval(request)
                span.attributes.update(
                    approved=answer.approved, scope=answer.scope, decided_by=answer.decided_by
                )
        shown_hash = request.call_hash
        if answer.request_id != request.request_id:
            raise ApprovalDeniedError(
                "the decision received was for another request", tool_name=spec.name
            )
        if not answer.approved:
            raise ApprovalDeniedError(
                f"a human did not approve {spec.name}: {answer.reason or 'no reason given'}",
                tool_name=spec.name,
            )
        if call_hash(spec.name, arguments) != shown_hash:
            raise ApprovalDeniedError(
                "the arguments changed after approval; the approved call was not this one",
                tool_name=spec.name,
            )
        self._grants.add(answer, **scope)
