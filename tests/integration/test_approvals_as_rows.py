"""Approval requests are rows: decided once, from any process, and a damaged task keeps to itself.

Real SQLite, real processes: each resolver is a separate Python process on the same database,
started so that they decide at the same instant.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core_agent import create_kernel
from core_agent.contracts.errors import CorruptStateError, UsageError
from core_agent.contracts.settings import AgentSettings
from providers.sqlite.database import sqlite_driver
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio
RESOLVER = Path(__file__).parents[1] / "support" / "approval_resolver.py"
ROUNDS = 4


def two_secret_reads(tmp_path: Path, name: str) -> tuple[AgentSettings, dict[str, str]]:
    """Settings whose scripted model reads two secret files in one turn, then answers."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / ".env").write_text("TOKEN=abc123\n")
    (workspace / ".env.local").write_text("LOCAL=xyz\n")
    script = tmp_path / f"{name}.json"
    reads = [{"name": "read_file", "arguments": {"path": p}} for p in (".env", ".env.local")]
    script.write_text(json.dumps([{"tool_calls": reads}, {"content": "Both files read."}]))
    data = tmp_path / "data"
    settings = AgentSettings(
        data_dir=data, workspace_roots=(workspace,), scripted_model_script=script
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(data),
        "AGENT_WORKSPACE_ROOTS": str(workspace),
        "AGENT_SCRIPTED_MODEL_SCRIPT": str(script),
        # This checkout's code in the children too (tests first, then the test's own path).
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    return settings, env


async def waiting_task(settings: AgentSettings) -> tuple[str, list[str]]:
    async with create_kernel(settings) as kernel:
        result = await kernel.execute_task(
            TaskRequest(task="Read both env files.", force_mode="react")
        )
        assert result.status is TaskStatus.WAITING_APPROVAL, result.error
        pending = [
            r.request_id for r in await kernel.pending_approvals() if r.task_id == result.task_id
        ]
    assert len(pending) == 2
    return result.task_id, pending


def resolve_at_once(env: dict[str, str], request_ids: list[str]) -> list[dict]:
    start_at = time.time() + 4  # past every resolver's start-up
    resolvers = [
        subprocess.Popen(
            [sys.executable, str(RESOLVER), request_id, str(start_at)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for request_id in request_ids
    ]
    outputs = []
    for resolver in resolvers:
        out, err = resolver.communicate(timeout=120)
        assert resolver.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    return outputs


async def test_two_processes_approving_two_requests_of_one_turn_both_succeed(tmp_path) -> None:
    for round_ in range(ROUNDS):
        settings, env = two_secret_reads(tmp_path, f"round{round_}")
        task_id, requests = await waiting_task(settings)
        outputs = resolve_at_once(env, requests)

        assert not [o for o in outputs if "error" in o and o.get("status") is None], outputs
        # One of them saw the last decision and ran the task to its end; the other was told
        # the task waits for the remaining request.
        assert sorted(o["status"] for o in outputs) == ["succeeded", "waiting_approval"]
        async with create_kernel(settings) as kernel:
            task = await kernel.get_task(task_id)
            assert task.status is TaskStatus.SUCCEEDED
            events = await kernel.task_events(task_id)
            spans = await kernel.task_spans(task_id)
            assert not [r for r in await kernel.pending_approvals() if r.task_id == task_id]
        kinds = [e.kind for e in events]
        assert kinds.count("approval.resolved") == 2
        assert kinds.count("task.resumed") == 1 and kinds.count("task.succeeded") == 1
        seqs = [e.seq for e in events]  # ephemeral events (deltas) take numbers too
        assert seqs == sorted(set(seqs))
        assert sorted(s.attributes["request_id"] for s in spans if s.kind == "approval") == sorted(
            requests
        )
        reads = [e for e in events if e.kind == "tool.completed"]
        assert len(reads) == 2 and all(not e.result.is_error for e in reads)


async def test_one_request_decided_by_two_processes_at_once_takes_one_decision(tmp_path) -> None:
    settings, env = two_secret_reads(tmp_path, "same")
    task_id, (first, second) = await waiting_task(settings)
    outputs = resolve_at_once(env, [first, first])
    assert sorted(o.get("status", o.get("error")) for o in outputs) == [
        "UsageError",
        "waiting_approval",
    ], outputs
    assert "already approved" in next(o["message"] for o in outputs if "message" in o)
    async with create_kernel(settings) as kernel:
        events = await kernel.task_events(task_id)
        spans = await kernel.task_spans(task_id)
        (still,) = [r for r in await kernel.pending_approvals() if r.task_id == task_id]
    assert still.request_id == second
    assert [e.kind for e in events].count("approval.resolved") == 1
    assert len([s for s in spans if s.kind == "approval"]) == 1


async def test_a_damaged_task_does_not_hide_or_break_the_others(tmp_path) -> None:
    settings, _ = two_secret_reads(tmp_path, "damaged")
    damaged, damaged_requests = await waiting_task(settings)
    _, healthy_requests = await waiting_task(settings)
    with sqlite_driver().connect(str(settings.database_path)) as conn:
        conn.execute(
            'UPDATE agent_task_events SET payload_json = \'{"kind": "garbage\' '
            "WHERE task_id = ? AND seq = 2",
            (damaged,),
        )
    async with create_kernel(settings) as kernel:
        listed = {r.request_id for r in await kernel.pending_approvals()}
        assert set(damaged_requests) | set(healthy_requests) <= listed

        with pytest.raises(CorruptStateError, match=damaged) as caught:
            await kernel.resolve_approval(
                damaged_requests[0],
                ApprovalDecision(request_id=damaged_requests[0], approved=True),
            )
        assert "event 2" in str(caught.value)
        # Nothing was decided for the damaged task: its requests still wait.
        assert set(damaged_requests) <= {r.request_id for r in await kernel.pending_approvals()}

        for request_id in healthy_requests:
            result = await kernel.resolve_approval(
                request_id, ApprovalDecision(request_id=request_id, approved=True)
            )
        assert result.status is TaskStatus.SUCCEEDED, result.error
        with pytest.raises(UsageError, match="already approved"):
            await kernel.resolve_approval(
                healthy_requests[0],
                ApprovalDecision(request_id=healthy_requests[0], approved=True),
            )


async def test_requests_recorded_before_the_table_existed_are_carried_over(tmp_path) -> None:
    settings, _ = two_secret_reads(tmp_path, "old")
    task_id, requests = await waiting_task(settings)
    async with create_kernel(settings) as kernel:
        await kernel.resolve_approval(
            requests[0], ApprovalDecision(request_id=requests[0], approved=False)
        )
    with sqlite_driver().connect(
        str(settings.database_path)
    ) as conn:  # back to the schema before it
        conn.execute("DROP TABLE agent_approvals")
        conn.execute("PRAGMA user_version = 5")
    async with create_kernel(settings) as kernel:  # migrates, filling it from the events
        (still,) = [r for r in await kernel.pending_approvals() if r.task_id == task_id]
        assert still.request_id == requests[1]
        with pytest.raises(UsageError, match="already denied"):
            await kernel.resolve_approval(
                requests[0], ApprovalDecision(request_id=requests[0], approved=True)
            )


async def test_requests_of_a_task_that_ended_while_waiting_are_not_listed(tmp_path) -> None:
    settings, _ = two_secret_reads(tmp_path, "ended")
    task_id, requests = await waiting_task(settings)
    async with create_kernel(settings) as kernel:
        await kernel.cancel_task(task_id, "not needed any more")
        assert not [r for r in await kernel.pending_approvals() if r.task_id == task_id]
        with pytest.raises(UsageError, match="canceled"):
            await kernel.resolve_approval(
                requests[0], ApprovalDecision(request_id=requests[0], approved=True)
            )


async def test_every_event_of_a_step_that_stops_for_a_human_is_published(tmp_path) -> None:
    # The step's events commit with it; the step ends by raising (it suspends), and its
    # model turn, tool start and policy decision must still reach the bus, as they reach the
    # store: hosts (stream_task, the stdio server) learn of tasks from the bus only.
    settings = AgentSettings(data_dir=tmp_path, policy_approval_required_risk="low")
    async with create_kernel(settings) as kernel:
        published: list[tuple[int, str]] = []
        kernel.event_bus.subscribe(None, lambda event: published.append((event.seq, event.kind)))
        result = await kernel.execute_task(TaskRequest(task="What is 6 * 7?"))
        assert result.status is TaskStatus.WAITING_APPROVAL
        stored = [(event.seq, event.kind) for event in await kernel.task_events(result.task_id)]
    assert [entry for entry in published if entry[1] != "llm.delta"] == stored
    assert "policy.decided" in {kind for _, kind in published}
