"""What the kernel keeps on disk (prompts, answers, tool results) is readable by its user alone.

With the usual umask (022) a folder or file made without a mode is readable by every local
user. Each test sets that umask and lets the real kernel make a data directory that does not
exist yet, parents and all.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_agent import create_kernel
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import TaskRequest, TaskStatus

CLI = Path(sys.executable).with_name("core-agent")

pytestmark = pytest.mark.anyio


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def run_in(data_dir: Path, task: str) -> subprocess.CompletedProcess[str]:
    """``core-agent run TASK`` with ``data_dir`` as its data directory, no other settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    return subprocess.run(
        [str(CLI), "run", task],
        env={**base, "AGENT_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_a_command_creates_the_data_directory_and_database_for_its_user_only(
    tmp_path: Path, usual_umask: None
) -> None:
    data_dir = tmp_path / "home" / "share" / "core-agent"
    result = run_in(data_dir, "2 ** 10")
    assert result.returncode == 0, result.stderr
    for folder in (data_dir, data_dir.parent, data_dir.parent.parent):
        assert _mode(folder) == 0o700, folder
    assert _mode(data_dir / "core_agent.db") == 0o600


async def test_the_database_and_its_wal_and_shm_are_the_users_alone(
    tmp_path: Path, usual_umask: None
) -> None:
    data_dir = tmp_path / "fresh" / "data"
    async with create_kernel(AgentSettings(data_dir=data_dir)) as kernel:
        result = await kernel.execute_task(TaskRequest(task="2 ** 10"))
        assert result.status is TaskStatus.SUCCEEDED, result.error
        # While the kernel holds the database, SQLite's -wal and -shm files exist.
        database = data_dir / "core_agent.db"
        companions = [database.with_name(database.name + s) for s in ("-wal", "-shm")]
        assert all(path.exists() for path in companions)
        for path in (database, *companions):
            assert _mode(path) == 0o600, path
    assert _mode(data_dir) == 0o700
    assert _mode(data_dir.parent) == 0o700


async def test_a_data_directory_the_user_made_keeps_its_mode(
    tmp_path: Path, usual_umask: None
) -> None:
    data_dir = tmp_path / "shared"
    data_dir.mkdir(mode=0o750)
    async with create_kernel(AgentSettings(data_dir=data_dir)) as kernel:
        await kernel.execute_task(TaskRequest(task="2 ** 10"))
    assert _mode(data_dir) == 0o750  # theirs to set
    assert _mode(data_dir / "core_agent.db") == 0o600  # made by the kernel: private


def test_a_data_directory_made_open_to_everyone_is_refused_before_anything_is_written(
    tmp_path: Path, usual_umask: None
) -> None:
    # Reviewer's p2, as far as one user can play it: the folder is world-writable and holds
    # an empty database anyone may write (another user's would be refused for its owner too).
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    data_dir = shared / "core-agent"
    data_dir.mkdir()
    data_dir.chmod(0o777)
    (data_dir / "core_agent.db").touch()
    (data_dir / "core_agent.db").chmod(0o666)
    result = run_in(data_dir, "secret-project-zeta: 2 ** 10")
    assert result.returncode == 2, result.stderr
    assert f"data directory {data_dir} may be written by every local user" in result.stderr
    assert (data_dir / "core_agent.db").stat().st_size == 0
    assert sorted(p.name for p in data_dir.iterdir()) == ["core_agent.db"]


async def test_an_earlier_versions_data_directory_is_the_users_alone_once_opened(
    tmp_path: Path, usual_umask: None
) -> None:
    # Reviewer's p3: folder 0755 and database 0644, as a version before cd1a82e left them.
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    async with create_kernel(AgentSettings(data_dir=data_dir)) as kernel:
        await kernel.execute_task(TaskRequest(task="2 ** 10"))
    (data_dir / "core_agent.db").chmod(0o644)
    data_dir.chmod(0o755)
    async with create_kernel(AgentSettings(data_dir=data_dir)) as kernel:
        result = await kernel.execute_task(TaskRequest(task="2 ** 11"))
        assert result.status is TaskStatus.SUCCEEDED, result.error
        database = data_dir / "core_agent.db"
        for path in (database, database.with_name(database.name + "-wal")):
            assert _mode(path) == 0o600, path
    assert _mode(data_dir) == 0o750  # others out; the group's read is the user's to give
