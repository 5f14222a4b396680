"""A task that asks a human keeps waiting across a restart, and resumes once."""

import json

import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import UsageError
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedTurn,
)
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio
TASK = "Gather the figures, then chart them."


def gateway() -> ScriptedLLMGateway:
    def conv(match: str, *turns: ScriptedTurn) -> ScriptedConversation:
        return ScriptedConversation(match=match, turns=list(turns))

    def plan(*steps: str) -> ScriptedTurn:
        return ScriptedTurn(content=json.dumps({"steps": [{"id": s, "goal": s} for s in steps]}))

    down = ScriptedTurn(error=ScriptedError(message="data source offline", status_code=503))
    return ScriptedLLMGateway(
        conversations=[
            conv(r"^Plan this task:(?s:.*)cached copy", plan("cache")),
            conv(r"^Plan this task:", plan("gather")),
            conv(r"^Your step \(cache\)", ScriptedTurn(content="figures from the cache")),
            conv(r"^Your step", down),
            conv(r"^Write the final answer", ScriptedTurn(content="Charted from the cache.")),
            conv(r"^Gather the figures", down),
        ]
    )


def kernel(settings):
    container = KernelContainer()
    container.settings.override(settings.model_copy(update={"plan_max_replans": 0}))
    container.llm_gateway.override(gateway())
    return container.kernel()


async def test_pending_question_survives_a_restart_and_resolves_once(settings) -> None:
    async with kernel(settings) as first:
        result = await first.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    assert result.status is TaskStatus.WAITING_APPROVAL

    async with kernel(settings) as second:  # a new process, the same database
        (pending,) = await second.pending_approvals()
        assert pending.request_id == result.pending_approval
        assert pending.task_id == result.task_id
        decision = ApprovalDecision(
            request_id=pending.request_id, approved=True, reason="use the cached copy"
        )
        resumed = await second.resolve_approval(pending.request_id, decision)
        assert resumed.status is TaskStatus.SUCCEEDED, resumed.error
        assert resumed.output == "Charted from the cache."
        with pytest.raises(UsageError, match="already approved"):
            await second.resolve_approval(pending.request_id, decision)
        state = await second.get_task(result.task_id)
        kinds = [e.kind for e in await second.task_events(result.task_id)]
    assert state.status is TaskStatus.SUCCEEDED
    assert kinds.count("approval.requested") == 1 and kinds.count("approval.resolved") == 1
    assert kinds.index("task.waiting_approval") < kinds.index("task.resumed")
