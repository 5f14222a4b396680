"""A host killed with SIGKILL while a grandchild task runs, recovered by a new kernel.

The recovery takes over the three tasks at once (root, child, grandchild): each must be
carried on, not created again, the grandchild's effect not repeated, and the root must end
once, with the answer.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest

from shared.agent_protocol import TaskStatus
from support.nested_crash_host import kernel_on

pytestmark = pytest.mark.anyio
TESTS = Path(__file__).resolve().parents[1]


async def test_a_host_killed_while_a_grandchild_runs_is_recovered_without_repeats(
    tmp_path: Path,
) -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    with anyio.fail_after(120):
        host = await anyio.run_process(
            [sys.executable, "-m", "support.nested_crash_host", str(tmp_path)],
            env=environment,
            check=False,
        )
    assert host.returncode == -9, host.stderr.decode()[-2000:]
    kernel = kernel_on(tmp_path, crash=False)
    async with kernel:
        before = {t.task_id: t for t in await kernel.list_tasks()}
        assert len(before) == 3
        assert {t.status for t in before.values()} == {TaskStatus.RUNNING}
        await kernel.recover("resume")
        tasks = {t.task_id: t for t in await kernel.list_tasks()}
        assert tasks.keys() == before.keys()  # no child created again
        assert {t.status for t in tasks.values()} == {TaskStatus.SUCCEEDED}, [
            (t.task_id, t.error) for t in tasks.values()
        ]
        assert tasks["root"].output == "Root: shipped."
        assert (tmp_path / "effects.txt").read_text().splitlines() == ["e1"]
        for task_id in tasks:
            kinds = Counter(e.kind for e in await kernel.task_events(task_id))
            assert kinds["task.queued"] == 1
            assert kinds["task.succeeded"] == 1
            assert kinds["task.resumed"] >= 1
        # Usage rolls up once: the root's is every model call's of the three tasks, the
        # calls made before the crash and after it, each counted once.
        spent = 0
        for task_id in tasks:
            spent += sum(
                e.usage.input_tokens
                for e in await kernel.task_events(task_id)
                if e.kind == "llm.completed"
            )
        assert tasks["root"].usage.input_tokens == spent


async def test_a_recovering_host_without_the_agent_tools_leaves_their_tasks_to_one_with_them(
    tmp_path: Path,
) -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    with anyio.fail_after(120):
        host = await anyio.run_process(
            [sys.executable, "-m", "support.nested_crash_host", str(tmp_path)],
            env=environment,
            check=False,
        )
    assert host.returncode == -9, host.stderr.decode()[-2000:]
    kernel = kernel_on(tmp_path, crash=False, agents=False)
    async with kernel:
        with anyio.fail_after(60):
            await kernel.recover("resume")
        tasks = {t.task_id: t for t in await kernel.list_tasks()}
        assert len(tasks) == 3
        # Nothing hangs: the tasks that were calling an agent this host does not know are
        # left as they are (their calls may be under way), for a host that has the agents;
        # the grandchild, whose request holds all it needs, is carried to its end.
        assert tasks["root"].status is TaskStatus.RUNNING and tasks["root"].owner is None
        child = next(t for t in tasks.values() if t.request.parent and t.request.parent.depth == 1)
        assert child.status is TaskStatus.RUNNING and child.owner is None
        grandchild = next(
            t for t in tasks.values() if t.request.parent and t.request.parent.depth == 2
        )
        assert grandchild.status is TaskStatus.SUCCEEDED
        assert (tmp_path / "effects.txt").read_text().splitlines() == ["e1"]
    # The host that has the agents carries them to their ends, repeating no effect.
    async with kernel_on(tmp_path, crash=False) as home:
        with anyio.fail_after(60):
            await home.recover("resume")
        assert {t.status for t in await home.list_tasks()} == {TaskStatus.SUCCEEDED}
    assert (tmp_path / "effects.txt").read_text().splitlines() == ["e1"]
