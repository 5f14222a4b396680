"""A host killed with SIGKILL mid-task, then recovered by another process.

The host (``support.crash_host``) runs multi-step tasks whose tool records each effect in a
file. Whatever the moment of the kill, recovery must leave no step lost, no effect doubled,
every task ended, and the database whole. A crash inside a tool that cannot be repeated safely
goes to a human, with the call and a word that it may or may not have happened. The harness
(``support.crash_harness``) is shared with ``benchmarks/crash_recovery.py``.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import anyio
import pytest

from shared.agent_protocol import ApprovalDecision, TaskStatus
from support.crash_harness import config_in, effects, kill_and_recover, recover_all, start_host

pytestmark = pytest.mark.anyio
ITERATIONS = int(os.environ.get("CRASH_ITERATIONS", "20"))


async def test_a_crash_inside_an_idempotent_tool_is_recovered_without_a_repeat(
    tmp_path: Path,
) -> None:
    config = config_in(tmp_path, crash_at="r2", dedupe=True)
    host = start_host(config)
    assert host.wait(timeout=60) == -9  # it killed itself right after the effect of r2
    kernel, tasks = await recover_all(config)
    try:
        (task,) = tasks
        assert task.status is TaskStatus.SUCCEEDED, task.error
        recorded = Counter(step for _, step in effects(Path(config["effects"])))
        assert recorded == Counter({"r1": 1, "r2": 1, "r3": 1})
        resumed = [e for e in await kernel.task_events(task.task_id) if e.kind == "task.resumed"]
        assert resumed and resumed[0].owner == kernel.owner
    finally:
        await kernel.aclose()


async def test_a_call_that_may_or_may_not_have_happened_goes_to_a_human(tmp_path: Path) -> None:
    config = config_in(tmp_path, crash_at="r2", dedupe=False)
    host = start_host(config)
    assert host.wait(timeout=60) == -9
    kernel, tasks = await recover_all(config)
    try:
        (task,) = tasks
        assert task.status is TaskStatus.WAITING_APPROVAL, task.error
        (pending,) = await kernel.pending_approvals()
        assert pending.tool_call is not None and pending.tool_call.name == "effect"
        assert pending.tool_call.arguments == {"step": "r2"}
        assert "may or may not" in (pending.reason or "")
        # Nothing was run again on its own.
        assert Counter(step for _, step in effects(Path(config["effects"]))) == {"r1": 1, "r2": 1}
        done = await kernel.resolve_approval(
            pending.request_id,
            ApprovalDecision(request_id=pending.request_id, approved=True),
        )
        assert done.status is TaskStatus.SUCCEEDED, done.error
        # The human chose to run it again: that is the one repeat.
        assert Counter(step for _, step in effects(Path(config["effects"]))) == {
            "r1": 1,
            "r2": 2,
            "r3": 1,
        }
    finally:
        await kernel.aclose()


async def test_an_approved_call_cut_by_a_crash_is_not_run_again_on_that_approval(
    tmp_path: Path,
) -> None:
    # The human approved running ``effect r2``; the host died inside it. Whether to run it
    # again (it may have acted) is another question: the approval to run it once was taken
    # for that answer, and recovery ran it a second time without asking.
    config = config_in(tmp_path, crash_at="r2", dedupe=False, approval_risk="low")
    host = start_host({**config, "approve_all": True})
    assert host.wait(timeout=60) == -9
    kernel, tasks = await recover_all(config)
    try:
        (task,) = tasks
        assert task.status is TaskStatus.WAITING_APPROVAL, task.error
        (pending,) = await kernel.pending_approvals()
        assert pending.tool_call is not None and pending.tool_call.arguments == {"step": "r2"}
        assert pending.rule == "ledger:uncertain"
        assert Counter(step for _, step in effects(Path(config["effects"]))) == {"r1": 1, "r2": 1}
    finally:
        await kernel.aclose()


async def test_a_decision_to_run_a_call_again_covers_one_attempt(tmp_path: Path) -> None:
    # Recovery asks whether to run ``effect r2`` again; the human says yes; that run is cut
    # short too. The next recovery asks again: the yes was for the attempt it was shown.
    config = config_in(tmp_path, crash_at="r2", dedupe=False)
    assert start_host(config).wait(timeout=60) == -9
    kernel, tasks = await recover_all(config)
    try:
        (pending,) = await kernel.pending_approvals()
        assert pending.rule == "ledger:uncertain"
    finally:
        await kernel.aclose()
    # The approved run, in a host that dies inside it again.
    resolver = start_host({**config, "resolve_pending": True})
    assert resolver.wait(timeout=60) == -9
    assert Counter(step for _, step in effects(Path(config["effects"]))) == {"r1": 1, "r2": 2}
    kernel, tasks = await recover_all(config)
    try:
        (task,) = tasks
        assert task.status is TaskStatus.WAITING_APPROVAL, task.error
        (again,) = await kernel.pending_approvals()
        assert again.rule == "ledger:uncertain" and again.request_id != pending.request_id
        assert Counter(step for _, step in effects(Path(config["effects"]))) == {"r1": 1, "r2": 2}
    finally:
        await kernel.aclose()


async def test_hosts_killed_at_random_moments_lose_and_repeat_nothing(tmp_path: Path) -> None:
    chance = random.Random(int(os.environ.get("CRASH_SEED", "7")))
    report = [
        await kill_and_recover(tmp_path / f"run{iteration}", iteration, chance)
        for iteration in range(ITERATIONS)
    ]
    problems = [r for r in report if r.problem]
    assert not problems, problems
    # The kills landed while tasks ran (else there was nothing to recover).
    assert sum(1 for r in report if r.caught) >= ITERATIONS // 2, report


async def test_a_kernel_closed_while_recovering_leaves_the_task_for_the_next_one(
    tmp_path: Path,
) -> None:
    from support.crash_host import kernel_for

    config = config_in(tmp_path, crash_at="r1", dedupe=True, steps=4)
    host = start_host(config)
    assert host.wait(timeout=60) == -9
    # A kernel recovers in the background and is closed mid-task (its tool takes a while).
    slow = {**config, "recovery": "resume", "crash_at": None, "effect_delay_s": 0.3}
    async with kernel_for(slow) as kernel:
        with anyio.fail_after(30):
            # The effects file is written by the tool: nothing to wait on but the file.
            while len(effects(Path(config["effects"]))) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        (task,) = await kernel.list_tasks(limit=10)
    assert task.status is TaskStatus.RUNNING

    kernel, (after,) = await recover_all(config)
    try:
        assert after.status is TaskStatus.SUCCEEDED, after.error
        kinds = [e.kind for e in await kernel.task_events(after.task_id)]
        assert "task.canceled" not in kinds and kinds.count("task.resumed") == 2
        recorded = Counter(step for _, step in effects(Path(config["effects"])))
        assert recorded == Counter({"r1": 1, "r2": 1, "r3": 1, "r4": 1})
    finally:
        await kernel.aclose()


async def test_one_kernel_never_runs_a_task_twice_when_asked_to_resume_it_twice(
    tmp_path: Path,
) -> None:
    from core_agent.contracts.errors import UsageError
    from support.crash_host import kernel_for

    config = config_in(tmp_path, crash_at="r1", dedupe=True, steps=3)
    host = start_host(config)
    assert host.wait(timeout=60) == -9
    async with kernel_for({**config, "crash_at": None, "effect_delay_s": 0.05}) as kernel:
        (task,) = await kernel.list_tasks(limit=10)
        outcomes: list[object] = []

        async def resume() -> None:
            try:
                outcomes.append(await kernel.resume(task.task_id))
            except UsageError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(resume)
            group.start_soon(resume)
        refused = [o for o in outcomes if isinstance(o, UsageError)]
        finished = [o for o in outcomes if not isinstance(o, UsageError)]
        assert len(refused) == 1 and "already runs in this kernel" in str(refused[0])
        (result,) = finished
        assert result.status is TaskStatus.SUCCEEDED, result.error  # type: ignore[attr-defined]
        kinds = [e.kind for e in await kernel.task_events(task.task_id)]
        assert kinds.count("task.resumed") == 1
    recorded = Counter(step for _, step in effects(Path(config["effects"])))
    assert recorded == Counter({"r1": 1, "r2": 1, "r3": 1})
