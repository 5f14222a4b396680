"""A rerun ends at its first divergence under every strategy: nothing of it waits for a human
or goes on live (reviewer's probe: a diverged plan-and-execute rerun became a question whose
approval ran the task live, untainted)."""

import json
from pathlib import Path

import pytest

from core_agent import AgentSettings, create_kernel
from core_agent.replay import rerun_task
from shared.agent_protocol import TaskRequest, TaskStatus
from support.lookup_tools import lookup, lookup_moved

pytestmark = pytest.mark.anyio


PLAN = {"steps": [{"id": "a", "goal": "look the capital up", "depends_on": []}]}
SCRIPT = {
    "conversations": [
        {"match": "^Plan this task", "turns": [{"content": json.dumps(PLAN)}]},
        {
            "match": "^Your step \\(a\\)",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"key": "capital_fr"}}]},
                {"content": "the capital is Paris"},
            ],
        },
        {"match": "^Write the final answer", "turns": [{"content": "Paris."}]},
    ]
}


def settings_for(tmp_path: Path) -> AgentSettings:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    return AgentSettings(
        data_dir=tmp_path / "data", scripted_model_script=script, strategy_mode="plan_execute"
    )


async def test_a_diverged_plan_rerun_fails_and_leaves_no_question(tmp_path) -> None:
    settings = settings_for(tmp_path)
    async with create_kernel(settings, tools=[lookup]) as kernel:
        recorded = await kernel.execute_task(TaskRequest(task="What is the capital of France?"))
    assert recorded.status is TaskStatus.SUCCEEDED, recorded.error

    # The tool now answers otherwise: the step's next model answer no longer applies, and
    # neither a replan, the ReAct fallback nor a human's question may follow.
    report = await rerun_task(
        recorded.task_id, settings=settings, tools=[lookup_moved], tool_results="live"
    )
    assert not report.reproduced
    assert report.status is TaskStatus.FAILED
    async with create_kernel(settings, tools=[lookup]) as kernel:
        assert await kernel.pending_approvals() == []
        rerun = await kernel.get_task(report.rerun_task_id)
        events = await kernel.task_events(report.rerun_task_id)
    assert rerun.status is TaskStatus.FAILED
    assert "diverged" in (rerun.error or "")
    kinds = [event.kind for event in events]
    assert "approval.requested" not in kinds
    assert "strategy.fallback" not in kinds
    assert kinds.count("plan.created") == 1  # no replan


async def test_a_model_error_recorded_is_replayed(tmp_path) -> None:
    # Reviewer: a task that failed with a model error "diverged: the recording has 0"; a
    # plan step that failed with one shifted every later recorded answer by one.
    plan = {"steps": [{"id": "a", "goal": "look it up", "depends_on": []}]}
    replan = {"steps": [{"id": "r1", "goal": "look it up again", "depends_on": []}]}
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "conversations": [
                    {"match": "Earlier attempt", "turns": [{"content": json.dumps(replan)}]},
                    {"match": "^Plan this task", "turns": [{"content": json.dumps(plan)}]},
                    {
                        "match": "^Your step \\(a\\)",
                        "turns": [{"error": {"message": "upstream exploded", "status_code": 400}}],
                    },
                    {
                        "match": "^Your step \\(r1\\)",
                        "turns": [
                            {
                                "tool_calls": [
                                    {"name": "lookup", "arguments": {"key": "capital_fr"}}
                                ]
                            },
                            {"content": "Paris"},
                        ],
                    },
                    {"match": "^Write the final answer", "turns": [{"content": "Paris."}]},
                    {
                        "match": "^Broken",
                        "turns": [{"error": {"message": "bad request", "status_code": 400}}],
                    },
                ]
            }
        )
    )
    for mode, task in (("plan_execute", "What is the capital of France?"), ("react", "Broken")):
        settings = AgentSettings(
            data_dir=tmp_path / "data", scripted_model_script=script, strategy_mode=mode
        )
        async with create_kernel(settings, tools=[lookup]) as kernel:
            recorded = await kernel.execute_task(TaskRequest(task=task))
        report = await rerun_task(recorded.task_id, settings=settings, tools=[lookup])
        expected = TaskStatus.SUCCEEDED if mode == "plan_execute" else TaskStatus.FAILED
        assert recorded.status is expected, recorded.error
        assert report.reproduced, (mode, report.first_difference, report.extra_model_call)
        assert report.status is recorded.status
