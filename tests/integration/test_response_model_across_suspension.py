"""A task started with a response model still answers with it after waiting for a human.

Real SQLite stores; the decision is taken by a second kernel on the same database, or by a
separate Python process (``support.structured_host``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from core_agent.contracts.errors import ResponseModelError, TaskFailedError
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskResult, TaskStatus
from support.structured_host import TASK, kernel_for
from support.structured_models import Restock

pytestmark = pytest.mark.anyio
HOST = Path(__file__).parents[1] / "support" / "structured_host.py"
STRATEGIES = ["react", "plan_execute"]


def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "data", tmp_path / "effects.txt"


def restarts(effects: Path) -> int:
    return effects.read_text().count("restart shop") if effects.exists() else 0


async def waiting(tmp_path: Path, strategy: str, model: type[BaseModel] = Restock) -> TaskResult:
    """Start the structured task with no approver: it waits on its risky call."""
    async with kernel_for(*paths(tmp_path)) as first:
        with pytest.raises(TaskFailedError) as stopped:
            await first.execute_task(
                TaskRequest(task=TASK, force_mode=strategy), response_model=model
            )
        result = stopped.value.result
        assert isinstance(result, TaskResult)
        assert result.status is TaskStatus.WAITING_APPROVAL, result.error
        state = await first.get_task(result.task_id)
    assert state.response_model == f"{model.__module__}:{model.__qualname__}"
    assert state.response_schema == model.model_json_schema()
    return result


def approve(result: TaskResult) -> ApprovalDecision:
    assert result.pending_approval is not None
    return ApprovalDecision(request_id=result.pending_approval, approved=True)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_resolved_by_another_kernel_the_answer_is_validated_structured_output(
    tmp_path, strategy
) -> None:
    result = await waiting(tmp_path, strategy)
    async with kernel_for(*paths(tmp_path)) as second:
        done = await second.resolve_approval(
            result.pending_approval, approve(result), response_model=Restock
        )
    assert done.status is TaskStatus.SUCCEEDED, done.error
    assert Restock.model_validate(done.structured_output) == Restock(
        service="shop", restarted=True, items=12
    )
    assert restarts(paths(tmp_path)[1]) == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_with_a_host_approver_the_typed_answer_comes_back(tmp_path, strategy) -> None:
    class Local(BaseModel):  # not findable by name: the kernel keeps the class it was given
        service: str
        restarted: bool
        items: int

    async with kernel_for(*paths(tmp_path)) as only:
        only.set_approval_callback(
            lambda request: ApprovalDecision(request_id=request.request_id, approved=True)
        )
        answer = await only.execute_task(
            TaskRequest(task=TASK, force_mode=strategy), response_model=Local
        )
        assert only._response_models == {}  # nothing kept once the task ended
    assert answer == Local(service="shop", restarted=True, items=12)


async def test_a_model_this_process_cannot_find_must_be_given_again(tmp_path) -> None:
    class Local(BaseModel):  # defined in a function: no process can find it by name
        service: str
        restarted: bool
        items: int

    class Other(BaseModel):
        service: str

    result = await waiting(tmp_path, "react", Local)
    async with kernel_for(*paths(tmp_path)) as second:
        with pytest.raises(ResponseModelError, match="pass the class again") as missing:
            await second.resolve_approval(result.pending_approval, approve(result))
        assert missing.value.expected is not None and missing.value.expected.endswith("Local")
        with pytest.raises(ResponseModelError, match="JSON Schema differs"):
            await second.resolve_approval(
                result.pending_approval, approve(result), response_model=Other
            )
        # Nothing was recorded by the refusals: the request still waits, the call never ran.
        assert [r.request_id for r in await second.pending_approvals()] == [result.pending_approval]
        assert restarts(paths(tmp_path)[1]) == 0
        done = await second.resolve_approval(
            result.pending_approval, approve(result), response_model=Local
        )
    assert done.status is TaskStatus.SUCCEEDED, done.error
    assert Local.model_validate(done.structured_output).items == 12


async def test_a_task_without_a_response_model_refuses_one(tmp_path) -> None:
    async with kernel_for(*paths(tmp_path)) as first:
        result = await first.execute_task(TaskRequest(task=TASK, force_mode="react"))
    async with kernel_for(*paths(tmp_path)) as second:
        with pytest.raises(ResponseModelError, match="started without a response_model"):
            await second.resolve_approval(
                result.pending_approval, approve(result), response_model=Restock
            )


def resolve_in_another_process(tmp_path: Path, result: TaskResult, mode: str) -> dict:
    data, effects = paths(tmp_path)
    tests = Path(__file__).parents[1]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), *sys.path])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "support.structured_host",
            str(data),
            str(effects),
            str(result.pending_approval),
            mode,
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_another_process_answers_with_the_model_by_name_or_given(tmp_path, strategy) -> None:
    result = await waiting(tmp_path, strategy)
    refused = resolve_in_another_process(tmp_path, result, "unknown")
    assert refused["error"] == "ResponseModelError", refused
    assert "support.structured_models:Restock" in refused["message"]

    done = TaskResult.model_validate(resolve_in_another_process(tmp_path, result, "imported"))
    assert done.status is TaskStatus.SUCCEEDED, done.error
    assert Restock.model_validate(done.structured_output).restarted
    assert restarts(paths(tmp_path)[1]) == 1


async def test_given_again_in_another_process(tmp_path) -> None:
    result = await waiting(tmp_path, "plan_execute")
    done = TaskResult.model_validate(resolve_in_another_process(tmp_path, result, "given"))
    assert done.status is TaskStatus.SUCCEEDED, done.error
    assert Restock.model_validate(done.structured_output).items == 12
