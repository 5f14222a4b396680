"""Rerunning a task that handed sub-tasks to nested agents (reviewer's probe: such a task never
reran; the rerun "diverged" at the agent's call with "unknown tool 'helper'", since only plain
tools could be passed again).

The agents are passed again (``agents``); with recorded tools their calls give back the
child's recorded answer, as any tool's do. What cannot be played back yet (a child's own model
answers: live tools, a team's members) is refused up front, saying so, not reported as a
divergence.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from core_agent import Agent, AgentSettings, Team, create_kernel
from core_agent.contracts.errors import UsageError
from core_agent.replay import TaskRecords, build_trajectory, fork_task, rerun_task
from shared.agent_protocol import AgentHandoff, TaskRequest, TaskStatus
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

HELPER = Agent(name="helper", description="助手：算术", tools=("calculator",), force_mode="react")


@pytest.fixture
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
    )


async def record_nested(settings: AgentSettings, server: OpenAIServer) -> str:
    server.reply(tool_calls=[{"name": "helper", "arguments": {"task": "算 2**10"}}])
    server.reply(tool_calls=[{"name": "calculator", "arguments": {"expression": "2**10"}}])
    server.reply("子任务：1024")
    server.reply("父任务：结果是 1024")
    kernel = create_kernel(settings)
    kernel.agent_as_tool(HELPER)
    async with kernel:
        request = TaskRequest(task="让助手算 2 的十次方", force_mode="react")
        result = await kernel.execute_task(request)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    return result.task_id


async def test_a_task_that_called_an_agent_reruns_with_the_agent_passed_again(
    tmp_path, server
) -> None:
    settings = settings_for(tmp_path / "data", server)
    task_id = await record_nested(settings, server)
    asked = len(server.requests)

    report = await rerun_task(task_id, settings=settings, agents=[HELPER])

    assert report.reproduced, report.first_difference
    assert report.output == "父任务：结果是 1024"
    assert len(server.requests) == asked  # no model called, the child's included
    async with TaskRecords(settings) as records:
        events = (await records.load(report.rerun_task_id)).events
    # The child's answer came from the recording: no child task ran again.
    assert not [e for e in events if isinstance(e, AgentHandoff)]


async def test_without_the_agent_the_rerun_is_refused_naming_it(tmp_path, server) -> None:
    settings = settings_for(tmp_path / "data", server)
    task_id = await record_nested(settings, server)

    with pytest.raises(UsageError, match=r"nested agents as tools \(helper\).*agents="):
        await rerun_task(task_id, settings=settings)
    # Live, the child would ask for model answers the parent's recording does not hold.
    with pytest.raises(UsageError, match=r"\(helper\).*live tools.*not play back yet"):
        await rerun_task(task_id, settings=settings, agents=[HELPER], tool_results="live")


async def test_a_team_task_is_refused_naming_the_team(tmp_path, server) -> None:
    settings = settings_for(tmp_path / "data", server)
    team = Team(
        "reviewers",
        "Two reviewers.",
        members=[
            Agent(name="a", description="Reviewer A.", tools=(), force_mode="react"),
            Agent(name="b", description="Reviewer B.", tools=(), force_mode="react"),
        ],
        aggregate=lambda task, results: " / ".join(r.output or "" for r in results),
        max_concurrent=1,
    )
    server.reply("A: fine")
    server.reply("B: fine")
    async with create_kernel(settings) as kernel:
        result = await kernel.run_team(team, "review this")
    assert result.status is TaskStatus.SUCCEEDED, result.error

    with pytest.raises(UsageError, match=r"ran team 'reviewers'.*one by one"):
        await rerun_task(result.task_id, settings=settings, agents=[team])


async def test_a_fork_before_the_agent_call_runs_the_agent_passed_again(tmp_path, server) -> None:
    settings = settings_for(tmp_path / "data", server)
    task_id = await record_nested(settings, server)
    async with TaskRecords(settings) as records:
        steps = (await records.trajectory(task_id)).steps
    at = next(step.number for step in steps if step.kind == "model") + 1
    server.reply(tool_calls=[{"name": "calculator", "arguments": {"expression": "2**10"}}])
    server.reply("子任务：1024")
    server.reply("父任务：还是 1024")

    fork = await fork_task(task_id, at, settings=settings, agents=[HELPER])

    assert fork.result.status is TaskStatus.SUCCEEDED, fork.result.error
    assert fork.result.output == "父任务：还是 1024"


async def test_the_replay_of_a_task_shows_which_child_task_carried_out_its_agent_call(
    tmp_path, server
) -> None:
    """The handoff is a step of the parent's trajectory, naming the child task to replay."""
    settings = settings_for(tmp_path / "data", server)
    task_id = await record_nested(settings, server)
    async with TaskRecords(settings) as records:
        loaded = await records.load(task_id)
    trajectory = build_trajectory(loaded.task, loaded.events, loaded.spans)
    kinds = [step.kind for step in trajectory.steps]
    assert kinds.index("tool_call") < kinds.index("handoff") < kinds.index("tool_result")
    handoff = next(step for step in trajectory.steps if step.kind == "handoff")
    child = next(e for e in loaded.events if isinstance(e, AgentHandoff)).child_task_id
    assert handoff.data["agent"] == "helper" and handoff.data["child_task_id"] == child
    assert handoff.data["sub_task"] == "算 2**10"
    assert handoff.key is None  # shown, not compared: a played-back call runs no child
