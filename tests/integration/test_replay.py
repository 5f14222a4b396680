"""Replay through the Python API: a task recorded over the OpenAI protocol, read back, rerun
with the model played back (the server must not hear from it again), forked, compared,
exported and imported elsewhere."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_agent import AgentSettings, create_kernel, tool
from core_agent.contracts.errors import TaskNotFoundError, UsageError
from core_agent.replay import TaskRecords, fork_task, rerun_task
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    RiskLevel,
    TaskRequest,
    TaskStatus,
)
from support.lookup_tools import lookup, lookup_moved
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

REQUEST = "What is the capital of France? Note it down."


notebook: list[str] = []


@tool(capabilities={"write"})
def save_note(text: str) -> str:
    """Write a note down.

    Args:
        text: The note.
    """
    notebook.append(text)
    return f"saved note {len(notebook)}"


def approve(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(request_id=request.request_id, approved=True, decided_by="tester")


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def settings_for(data_dir: Path, server: OpenAIServer) -> AgentSettings:
    return AgentSettings(
        data_dir=data_dir,
        model="openai/test-model",
        model_api_base=server.base_url,
        model_api_key="sk-test",
        model_max_retries=0,
        # Every write asks a human: the task records a decision and an approval.
        policy_approval_required_risk="medium",
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, server: OpenAIServer) -> tuple[Path, str]:
    """A task with a route, two tool calls, their policy decisions, an approval, an answer."""
    import anyio

    data_dir = tmp_path_factory.mktemp("replay") / "data"
    server.reply(tool_calls=[{"name": "lookup", "arguments": {"key": "capital_fr"}}])
    server.reply(tool_calls=[{"name": "save_note", "arguments": {"text": "Paris"}}])
    server.reply("The capital of France is Paris; noted.")

    async def record() -> str:
        kernel = create_kernel(
            settings_for(data_dir, server), tools=[lookup, save_note], approval_callback=approve
        )
        async with kernel:
            result = await kernel.execute_task(TaskRequest(task=REQUEST))
        assert result.status is TaskStatus.SUCCEEDED, result.error
        return result.task_id

    return data_dir, anyio.run(record)


@pytest.fixture
def no_model(server: OpenAIServer) -> Iterator[OpenAIServer]:
    """The server answers nothing: a call to it would fail the run (and is counted)."""
    server.replies.clear()
    before = len(server.requests)
    yield server
    server.replies.clear()
    assert len(server.requests) == before, "the replay called the model"


async def test_replay_names_every_step_in_order(recorded) -> None:
    data_dir, task_id = recorded
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        trajectory = await records.trajectory(task_id[:8])
    kinds = [step.kind for step in trajectory.steps]
    assert kinds == [
        "route",
        "memory",  # recall from long-term memory
        "model",
        "tool_call",
        "policy",
        "tainted",  # what a read brings in is not the agent's own
        "tool_result",
        "model",
        "tool_call",
        "policy",
        "approval_request",
        "waiting",
        "approval",
        "resumed",
        "policy",  # judged again when the task carries on with the decision
        "tool_result",
        "model",
        "answer",
    ]
    assert [step.number for step in trajectory.steps] == list(range(1, len(kinds) + 1))
    by_kind = {}
    for step in trajectory.steps:
        by_kind.setdefault(step.kind, []).append(step.data)
    assert by_kind["route"][0]["strategy"] == "react"
    assert [c["name"] for c in by_kind["tool_call"]] == ["lookup", "save_note"]
    assert by_kind["tool_call"][0]["arguments"] == {"key": "capital_fr"}
    assert [r["content"] for r in by_kind["tool_result"]] == ["Paris", "saved note 1"]
    assert [p["approval_required"] for p in by_kind["policy"]] == [False, True, True]
    assert by_kind["approval_request"][0]["tool"] == "save_note"
    assert by_kind["approval"][0]["approved"] is True
    assert by_kind["approval"][0]["decided_by"] == "tester"
    assert by_kind["answer"][0]["output"] == "The capital of France is Paris; noted."
    assert by_kind["model"][0]["model"] == "openai/test-model"
    assert by_kind["model"][0]["usage"]["input_tokens"] > 0


async def test_rerun_reproduces_the_answer_without_calling_the_model(
    recorded, server, no_model
) -> None:
    data_dir, task_id = recorded
    notes_before = list(notebook)
    report = await rerun_task(
        task_id, settings=settings_for(data_dir, server), tools=[lookup, save_note]
    )
    assert report.reproduced, report.first_difference
    assert report.output == "The capital of France is Paris; noted."
    assert report.model_answers_replayed == report.model_answers_recorded == 3
    assert report.matching_steps == report.recorded_steps == report.rerun_steps
    assert notebook == notes_before  # recorded tools: the write was not done again
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        original = await records.load(task_id)
        rerun = await records.load(report.rerun_task_id)
    assert original.task.status is TaskStatus.SUCCEEDED  # untouched
    assert [e.event_id for e in original.events] == [
        e.event_id for e in (await _events(data_dir, task_id))
    ]
    assert rerun.task.request.metadata["replay_of"] == task_id
    assert rerun.task.session_id != original.task.session_id


async def _events(data_dir: Path, task_id: str):
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        return (await records.load(task_id)).events


async def test_a_tool_that_now_answers_otherwise_is_the_step_the_rerun_reports(
    recorded, server, no_model
) -> None:
    data_dir, task_id = recorded
    report = await rerun_task(
        task_id,
        settings=settings_for(data_dir, server),
        tools=[lookup_moved, save_note],
        tool_results="live",
    )
    assert not report.reproduced
    first = report.first_difference
    assert first is not None
    assert [s.kind for s in first.a] == [s.kind for s in first.b] == ["tool_result"]
    assert first.a[0].number == 7
    assert first.a[0].data["content"] == "Paris"
    assert first.b[0].data["content"] == "Lyon"
    assert '-  "content": "Paris",' in first.diff
    assert '+  "content": "Lyon",' in first.diff
    # It stopped there: the recorded answers were written for another run.
    assert report.status is TaskStatus.FAILED
    assert report.model_answers_replayed == 1
    assert report.matching_steps == 5


async def test_a_rerun_under_a_stricter_policy_reports_the_decision(
    recorded, server, no_model
) -> None:
    data_dir, task_id = recorded
    strict = settings_for(data_dir, server).model_copy(
        update={"policy_approval_required_risk": RiskLevel.LOW}
    )
    report = await rerun_task(task_id, settings=strict, tools=[lookup, save_note])
    first = report.first_difference
    assert first is not None and first.a[0].kind == first.b[0].kind == "policy"
    assert first.a[0].data["approval_required"] is False
    assert first.b[0].data["approval_required"] is True
    assert '"approval_required": true' in first.diff


async def test_fork_carries_the_conversation_on_live_from_a_step(recorded, server) -> None:
    data_dir, task_id = recorded
    server.replies.clear()
    server.reply("Paris, and I did not note it.")
    sent_before = len(server.requests)
    fork = await fork_task(
        task_id,
        7,  # the lookup's result: the fork's next step is a new model turn
        settings=settings_for(data_dir, server),
        tools=[lookup, save_note],
        system_prompt="Answer in one short sentence.",
    )
    assert fork.result.status is TaskStatus.SUCCEEDED
    assert fork.result.output == "Paris, and I did not note it."
    sent = server.requests[sent_before:]
    assert len(sent) == 1
    roles = [m["role"] for m in sent[0]["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert sent[0]["messages"][0]["content"].startswith("Answer in one short sentence.")
    # The conversation as the original's second model call was shown it (the lookup's
    # output marked as untrusted data, as then), under the new system prompt.
    original_second_call = server.requests[1]["messages"]
    assert sent[0]["messages"][1:] == original_second_call[1:]
    assert "Paris" in sent[0]["messages"][3]["content"]
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        trajectory = await records.trajectory(fork.task_id)
        comparison = await records.compare(task_id, fork.task_id)
    assert trajectory.task.request.metadata == {"forked_from": task_id, "fork_step": 7}
    assert [s.kind for s in trajectory.steps][:6] == [
        "route",
        "model",
        "tool_call",
        "policy",
        "tainted",
        "tool_result",
    ]
    assert "forked from" in next(s for s in trajectory.steps if s.kind == "resumed").data["reason"]
    # The same up to the fork, then the new model turn.
    assert comparison.matching_steps == 6
    first = comparison.first_difference
    assert first is not None and first.b[0].data["content"] == "Paris, and I did not note it."


async def test_fork_within_a_turn_runs_its_remaining_calls_first(recorded, server) -> None:
    data_dir, task_id = recorded
    server.replies.clear()
    server.reply("Noted again.")
    fork = await fork_task(
        task_id,
        9,  # save_note was asked for, not yet judged or run
        settings=settings_for(data_dir, server),
        tools=[lookup, save_note],
        approval_callback=approve,
    )
    assert fork.result.status is TaskStatus.SUCCEEDED
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        steps = (await records.trajectory(fork.task_id)).steps
    kinds = [s.kind for s in steps]
    # The cut call is not copied: it is judged and asked about in the fork only, then runs.
    assert kinds[kinds.index("resumed") :] == [
        "resumed",
        "tool_call",
        "policy",
        "approval_request",
        "waiting",
        "approval",
        "resumed",
        "policy",
        "tool_result",
        "model",
        "answer",
    ]
    assert kinds[: kinds.index("resumed")].count("policy") == 1


async def test_fork_refuses_steps_it_cannot_carry_on_from(recorded, server) -> None:
    data_dir, task_id = recorded
    settings = settings_for(data_dir, server)
    with pytest.raises(UsageError, match="answer"):
        await fork_task(task_id, 17, settings=settings, tools=[lookup, save_note])
    with pytest.raises(UsageError, match="steps 1 to 18"):
        await fork_task(task_id, 99, settings=settings, tools=[lookup, save_note])
    with pytest.raises(TaskNotFoundError):
        await fork_task("nosuchtask", 1, settings=settings)


async def test_diff_of_two_runs_of_the_same_work_is_empty(recorded, server, no_model) -> None:
    data_dir, task_id = recorded
    report = await rerun_task(
        task_id, settings=settings_for(data_dir, server), tools=[lookup, save_note]
    )
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        same = await records.compare(task_id, report.rerun_task_id)
    assert same.same and same.first_difference is None
    assert same.matching_steps == report.recorded_steps


async def test_export_import_elsewhere_then_replay_and_rerun(
    recorded, server, no_model, tmp_path
) -> None:
    data_dir, task_id = recorded
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        lines = list(await records.export(task_id))
        original = await records.trajectory(task_id)
    elsewhere = tmp_path / "elsewhere"
    async with TaskRecords(AgentSettings(data_dir=elsewhere)) as records:
        imported = await records.import_export(lines)
        copy = await records.trajectory(task_id)
        with pytest.raises(UsageError, match="already in this data directory"):
            await records.import_export(lines)
    assert imported.task_id == task_id
    assert copy.steps == original.steps
    report = await rerun_task(
        task_id, settings=settings_for(elsewhere, server), tools=[lookup, save_note]
    )
    assert report.reproduced, report.first_difference


async def test_an_imported_recording_never_acts_here_on_its_own_word(
    recorded, server, tmp_path
) -> None:
    # A bug-report file is anyone's word: edited to move the workspace, it must not move the
    # sandbox; its calls are not run for real by a rerun; a fork of it is tainted.
    data_dir, task_id = recorded
    async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
        lines = [json.loads(line) for line in await records.export(task_id)]
    victim = tmp_path / "victim"
    for line in lines:
        if line.get("type") == "task":
            line["task"]["request"]["workspace_roots"] = [str(victim)]
            line["task"]["request"]["metadata"]["imported"] = False  # the file cannot say
    elsewhere = tmp_path / "imported-here"
    async with TaskRecords(AgentSettings(data_dir=elsewhere)) as records:
        await records.import_export(json.dumps(line) for line in lines)
        copy = await records.load(task_id)
    assert copy.task.request.metadata["imported"] is True
    settings = settings_for(elsewhere, server)

    with pytest.raises(UsageError, match="was imported"):
        await rerun_task(task_id, settings=settings, tools=[lookup, save_note], tool_results="live")
    server.replies.clear()
    server.reply("Noted again.")
    fork = await fork_task(
        task_id, 9, settings=settings, tools=[lookup, save_note], approval_callback=approve
    )
    async with TaskRecords(AgentSettings(data_dir=elsewhere)) as records:
        forked = (await records.load(fork.task_id)).task
    assert forked.tainted and forked.request.workspace_roots is None
    assert not victim.exists()

    # A copy of a task here under a new task id (same trace id) is refused.
    renamed = [json.dumps(line).replace(task_id, "f" * 32) for line in lines]
    with pytest.raises(UsageError, match="trace id"):
        async with TaskRecords(AgentSettings(data_dir=data_dir)) as records:
            await records.import_export(renamed)
