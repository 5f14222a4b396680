"""The checks between a validated tool call and its execution: judgement, then approval.

Every call is judged (``safety.call_judgement``: the tool's own check and the policy rules);
the decision is a ``policy`` span and a ``policy.decided`` event, with the rule that matched.
A denied call is refused. A call at or above the approval threshold, or one the tool cannot
vouch for, runs only with a human's approval (or a standing grant from an earlier scoped
decision, which covers only what ``safety.approvals`` says: never a riskier call, nor a
tainted one when the approved call was not), and only if its arguments still hash to what the
human was shown. The gate returns
the call's permit: what the sandbox lets it do (an approved call may write the workspace).

``confirm_rerun`` asks the same human about a call found in the tool-call ledger without a
result after a crash (rule ``ledger:uncertain``, ``RERUN_RULE``): the request shows the call
and says it may or may not have happened, and the call runs again only if approved. An
approval to run a call never answers that question, and an answer to it covers one attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from core_agent.contracts.errors import (
    ApprovalDeniedError,
    ApprovalPendingError,
    ConfinementUnavailableError,
    PolicyDeniedError,
)
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.policy_engine import IPolicyEngine
from core_agent.contracts.tool import CallPermit, Capability, ITool, ToolContext
from core_agent.contracts.tool_call_ledger import LedgerEntry
from core_agent.observability.tracer import Tracer
from core_agent.safety.approvals import ApprovalGrants, call_hash
from core_agent.safety.call_judgement import judge_call
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    PolicyDecided,
    RiskLevel,
    ToolCall,
)

RERUN_RULE = "ledger:uncertain"
"""The rule of a request to run again a call that may or may not have acted."""


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

    @property
    def threshold(self) -> RiskLevel:
        """The risk at and above which a human must approve."""
        return self._threshold

    async def check(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        call: ToolCall,
        tool: ITool,
        arguments: Mapping[str, Any],
        validated: Mapping[str, Any],
        tool_context: ToolContext,
        parent_span_id: str | None,
        *,
        preapproved: bool = False,
    ) -> CallPermit:
        """The call's permit once it may run.

        ``preapproved``: a human just approved running this very call (``confirm_rerun``),
        so a call that needs approval is not asked about again.

        Raises:
            PolicyDeniedError: A deny rule or the tool's own check refused it.
            ApprovalDeniedError: It needed a human who did not approve.
            ApprovalPendingError: It waits for a human (the run suspends).
        """
        spec = tool.spec
        started = datetime.now(UTC)
        # Read once: a parallel call's output may taint the run while this one waits for a
        # human, and a grant must record the taint this call was judged under.
        tainted = context.run.tainted
        judgement = judge_call(
            self._policy,
            tool,
            arguments,
            validated,
            tool_context,
            tainted=tainted,
            threshold=self._threshold,
        )
        decision = judgement.decision
        needs_approval = judgement.approval_required
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
                "tainted": tainted,
                "network": decision.allow_network,
                # Why, in the policy's words, quotes the call (a command's line, a path):
                # content, recorded only with it. The verdict and the rule are not.
                **(
                    {
                        "reason": tracer.text(decision.reason),
                        "unproven": [tracer.text(u) for u in judgement.assessment.unproven[:10]],
                    }
                    if tracer.content
                    else {"unproven": len(judgement.assessment.unproven)}
                ),
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
            tainted=tainted,
        )
        if decision.denied:
            raise PolicyDeniedError(
                f"refused by policy rule {decision.rule!r}: {decision.reason}",
                tool_name=spec.name,
                rule=decision.rule,
            )
        if not needs_approval:
            return judgement.permit
        if preapproved:
            return judgement.approved_permit
        sandbox = tool_context.sandbox
        if Capability.EXEC in spec.capabilities and sandbox is not None:
            # Never ask a human to approve what cannot run here anyway.
            problem = await sandbox.command_readiness()
            if problem is not None:
                raise ConfinementUnavailableError(problem, tool_name=spec.name)
        covered = self._grants.covering(
            task_id=context.task.task_id,
            session_id=context.task.session_id,
            tool=spec.name,
            arguments=arguments,
            risk=decision.risk,
            tainted=tainted,
        )
        if covered is not None:
            return judgement.approved_permit
        request = _request(
            context,
            call,
            spec.name,
            arguments,
            risk=decision.risk,
            rule=decision.rule,
            reason=decision.reason,
            tainted=tainted,
        )
        request, answer = await self._ask(
            context,
            tracer,
            request,
            parent_span_id,
            unavailable=f"{spec.name} is {decision.risk.value} risk (rule {decision.rule!r}) "
            "and needs a human's approval, but no approver is connected",
        )
        self._check_answer(spec.name, arguments, request, answer)
        # The request the human saw, possibly judged before the task was suspended: the taint
        # it was judged under, not today's (taint that came while it waited was not shown).
        self._grants.add(answer, request, tainted=request.tainted is True)
        return judgement.approved_permit

    async def confirm_rerun(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        call: ToolCall,
        tool: ITool,
        arguments: Mapping[str, Any],
        entry: LedgerEntry,
        parent_span_id: str | None,
    ) -> None:
        """Ask a human whether a call that may or may not have acted should run again.

        The process that ran it stopped before its result was recorded, and running it twice
        could repeat its effect. Returns when they approve.

        Raises:
            ApprovalDeniedError: They did not (the model is told it may have happened).
            ApprovalPendingError: It waits for a human (the run suspends).
        """
        spec = tool.spec
        request = _request(
            context,
            call,
            spec.name,
            arguments,
            risk=RiskLevel.HIGH,
            rule=RERUN_RULE,
            reason=(
                # To the microsecond: the start names the attempt this question is about.
                f"{spec.name} started at {entry.started_at.isoformat(sep=' ')} and the "
                "process running it stopped before its result was recorded: it may or may "
                "not have taken effect. Approve to run it again; deny to tell the model it "
                "may have happened."
            ),
            tainted=context.run.tainted,
        )
        request, answer = await self._ask(
            context,
            tracer,
            request,
            parent_span_id,
            unavailable=f"{spec.name} may or may not have taken effect before the process "
            "stopped, and no approver is connected to decide whether to run it again",
        )
        self._check_answer(spec.name, arguments, request, answer)

    async def _ask(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        request: ApprovalRequest,
        parent_span_id: str | None,
        *,
        unavailable: str,
    ) -> tuple[ApprovalRequest, ApprovalDecision]:
        """The request shown to the human and their answer (or the run suspends)."""
        assert request.tool_call is not None
        call, name = request.tool_call, request.tool_call.name
        resumed = context.humans.resumed_approvals.get(call.id)
        if resumed is not None and _asks_the_same(resumed[0], request):
            # A human decided while the task was suspended; the shown call is the bound one.
            return resumed
        if context.humans.can_suspend:
            # Durable path: the executor checkpoints and the kernel asks (host or later).
            raise ApprovalPendingError([request])
        if context.humans.request_approval is None:
            raise ApprovalDeniedError(unavailable, tool_name=name)
        async with tracer.span("approval", name, parent_span_id=parent_span_id) as span:
            span.attributes.update(request_id=request.request_id, call_hash=request.call_hash)
            answer = await context.humans.request_approval(request)
            span.attributes.update(
                approved=answer.approved, scope=answer.scope, decided_by=answer.decided_by
            )
        return request, answer

    @staticmethod
    def _check_answer(
        name: str,
        arguments: Mapping[str, Any],
        request: ApprovalRequest,
        answer: ApprovalDecision,
    ) -> None:
        shown_hash = request.call_hash
        if answer.request_id != request.request_id:
            raise ApprovalDeniedError(
                "the decision received was for another request", tool_name=name
            )
        if not answer.approved:
            raise ApprovalDeniedError(
                f"a human did not approve {name}: {answer.reason or 'no reason given'}",
                tool_name=name,
            )
        if call_hash(name, arguments) != shown_hash:
            raise ApprovalDeniedError(
                "the arguments changed after approval; the approved call was not this one",
                tool_name=name,
            )


def _asks_the_same(shown: ApprovalRequest, asked: ApprovalRequest) -> bool:
    """Whether a human's decision on ``shown`` answers ``asked`` (about the same call).

    An approval to run a call is no decision to run it again after it may have acted
    (``RERUN_RULE``), nor the other way round; and a decision to run it again covers the
    attempt it named (its reason says when that attempt started; a later attempt, cut short
    too, starts later in the ledger). An approval to run it stands as given: the call shown is
    bound by its arguments' hash, and its grant by the taint it was shown under.
    """
    if (shown.rule == RERUN_RULE) != (asked.rule == RERUN_RULE):
        return False
    return shown.rule != RERUN_RULE or shown.reason == asked.reason


def _request(
    context: ExecutionContext,
    call: ToolCall,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    risk: RiskLevel,
    rule: str | None,
    reason: str,
    tainted: bool | None = None,
) -> ApprovalRequest:
    """A new request to approve ``call``, bound to the hash of its validated arguments."""
    return ApprovalRequest(
        request_id=uuid.uuid4().hex,
        task_id=context.task.task_id,
        session_id=context.task.session_id,
        tool_call=call,
        call_hash=call_hash(tool_name, arguments),
        risk=risk,
        rule=rule,
        reason=reason,
        created_at=datetime.now(UTC),
        tainted=tainted,
    )
