"""A call read back from the stores is never run with ``[REDACTED]`` in place of its secret.

The stores keep a call's arguments redacted. Reviewer's probe: a fork at the step before a
call, and a rerun with live tools, handed a ``db_login`` tool the connection string
``postgres://app:[REDACTED]@db.local/prod`` (and the rerun said it reproduced the task).
Both now refuse the call as a resumed turn does (``refuse_redacted_call``).
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from core_agent import AgentSettings, create_kernel, tool
from core_agent.replay import TaskRecords, fork_task, rerun_task
from core_agent.safety.redaction import MARK
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus, ToolCompleted
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

SECRET_URL = "postgres://app:S3cretPassw0rd@db.local/prod"
received: list[str] = []


@tool
def db_login(connection: str) -> str:
    """Log in to the database.

    Args:
        connection: The connection string.
    """
    received.append(connection)
    return "logged in"


@pytest.fixture(autouse=True)
def fresh_log() -> Iterator[None]:
    received.clear()
    yield
    received.clear()


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


async def record(tmp_path: Path, server: OpenAIServer) -> tuple[AgentSettings, str]:
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/test-model",
        model_api_base=server.base_url,
        model_api_key="sk-test",
        model_max_retries=0,
    )
    server.reply(tool_calls=[{"name": "db_login", "arguments": {"connection": SECRET_URL}}])
    server.reply("logged in to prod")
    async with create_kernel(settings, tools=[db_login]) as kernel:
        result = await kernel.execute_task(TaskRequest(task="log in to prod", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert received == [SECRET_URL]
    received.clear()
    return settings, result.task_id


async def test_a_fork_before_the_call_refuses_it_and_the_model_reads_why(tmp_path, server) -> None:
    settings, task_id = await record(tmp_path, server)
    async with TaskRecords(settings) as records:
        steps = (await records.trajectory(task_id)).steps
    at = next(step.number for step in steps if step.kind == "model") + 1  # before the call
    server.reply("I could not log in: the stored password is gone")

    fork = await fork_task(task_id, at, settings=settings, tools=[db_login])

    assert received == []  # the tool never saw the placeholder
    assert fork.result.status is TaskStatus.SUCCEEDED
    async with create_kernel(settings, tools=[db_login]) as kernel:
        events = await kernel.task_events(fork.task_id)
    (refused,) = [
        e.result for e in events if isinstance(e, ToolCompleted) and e.result.name == "db_login"
    ]
    assert refused.error_type == "RedactedArgumentsError"
    assert "connection" in refused.content and MARK in refused.content
    shown = server.requests[-1]["messages"][-1]  # the fork's model was told, by the tool result
    assert shown["role"] == "tool" and "RedactedArgumentsError" not in shown["content"]
    assert "was not run" in shown["content"]


async def test_a_live_rerun_refuses_the_call_and_says_it_did_not_reproduce(
    tmp_path, server
) -> None:
    settings, task_id = await record(tmp_path, server)
    asked = len(server.requests)

    report = await rerun_task(task_id, settings=settings, tools=[db_login], tool_results="live")

    assert received == []
    assert len(server.requests) == asked  # still no model called
    assert not report.reproduced
    (why,) = report.redacted_calls
    assert why.startswith("db_login (call ") and "connection" in why and MARK in why
    assert report.first_difference is not None


async def test_a_recorded_rerun_of_the_same_task_still_reproduces(tmp_path, server) -> None:
    # Recorded results act on nothing: the redacted arguments are only compared.
    settings, task_id = await record(tmp_path, server)
    report = await rerun_task(task_id, settings=settings, tools=[db_login])
    assert report.reproduced, report.first_difference
    assert received == [] and report.redacted_calls == []


@tool(capabilities={"write"})
def db_write(connection: str, sql: str) -> str:
    """Run a statement on the database.

    Args:
        connection: The connection string.
        sql: The statement.
    """
    received.append(connection)
    return "1 row"


async def test_an_approved_call_resumed_from_the_store_gets_the_same_refusal(
    tmp_path, server
) -> None:
    # The rule a fork and a rerun follow is the resumed turn's: one refusal, saying why (it
    # was "the arguments changed after approval", as if someone had tampered with them).
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/test-model",
        model_api_base=server.base_url,
        model_api_key="sk-test",
        model_max_retries=0,
        policy_approval_required_risk="medium",
    )
    arguments = {"connection": SECRET_URL, "sql": "delete from t"}
    server.reply(tool_calls=[{"name": "db_write", "arguments": arguments}])
    server.reply("could not run it")
    async with create_kernel(settings, tools=[db_write]) as kernel:
        waiting = await kernel.execute_task(TaskRequest(task="clean t", force_mode="react"))
        assert waiting.status is TaskStatus.WAITING_APPROVAL
        (request,) = await kernel.pending_approvals()
        result = await kernel.resolve_approval(
            request.request_id, ApprovalDecision(request_id=request.request_id, approved=True)
        )
        events = await kernel.task_events(result.task_id)
    assert received == []
    (refused,) = [e.result for e in events if isinstance(e, ToolCompleted)]
    assert refused.error_type == "RedactedArgumentsError", refused.content
    assert "connection" in refused.content and "sql" not in refused.content
