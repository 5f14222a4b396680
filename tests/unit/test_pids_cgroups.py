"""Finding the pids cgroup a root launcher puts its commands in (see providers/sandbox)."""

import os
from pathlib import Path

from providers.sandbox import pids_cgroups
from providers.sandbox.pids_cgroups import Hierarchy, parse_hierarchy

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_CGROUPS = "9:name=systemd:/\n8:pids:/ci/job 7\n4:memory:/x\n0::/\n"


def test_the_v1_pids_hierarchy_is_preferred_and_the_process_s_own_cgroup_is_found() -> None:
    assert parse_hierarchy(V1_MOUNTS, V1_CGROUPS) == Hierarchy(1, "/sys/fs/cgroup/pids/ci/job 7")


def test_the_unified_hierarchy_serves_when_pids_is_not_in_v1() -> None:
    mounts = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert parse_hierarchy(mounts, "0::/\n") == Hierarchy(2, "/sys/fs/cgroup")
    assert parse_hierarchy(mounts, "0::/user.slice/app\n") == Hierarchy(
        2, "/sys/fs/cgroup/user.slice/app"
    )


def test_a_mount_of_another_part_of_the_hierarchy_is_not_used() -> None:
    # A container that mounts only its own subtree: a process outside it has no directory.
    mounts = "39 31 0:36 /docker/abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n"
    assert parse_hierarchy(mounts, "8:pids:/docker/abc\n") == Hierarchy(1, "/sys/fs/cgroup/pids")
    assert parse_hierarchy(mounts, "8:pids:/elsewhere\n") is None


def test_escaped_mount_points_and_no_cgroups_at_all() -> None:
    mounts = r"39 31 0:36 / /mnt/cg\040pids rw - cgroup cgroup rw,pids" + "\n"
    assert parse_hierarchy(mounts, "8:pids:/\n") == Hierarchy(1, "/mnt/cg pids")
    assert parse_hierarchy("31 23 0:28 / /tmp rw - tmpfs tmpfs rw\n", "0::/\n") is None


def test_a_dead_launcher_s_empty_cgroups_are_removed_and_a_live_one_s_kept(
    tmp_path: Path,
) -> None:
    # Plain directories stand in for cgroups here: the removal only uses rmdir.
    namespace = pids_cgroups._pid_namespace()
    dead = tmp_path / f"{pids_cgroups.PREFIX}999999999-{namespace}-1"
    (dead / "3").mkdir(parents=True)
    reused = tmp_path / f"{pids_cgroups.PREFIX}{os.getpid()}-{namespace}-1"  # another start
    reused.mkdir()
    live = tmp_path / f"{pids_cgroups.PREFIX}{pids_cgroups._identity(os.getpid())}"
    (live / "1").mkdir(parents=True)
    elsewhere = tmp_path / f"{pids_cgroups.PREFIX}999999999-1-1"  # another PID namespace
    elsewhere.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()
    pids_cgroups._remove_dead_launchers(str(tmp_path))
    assert not dead.exists() and not reused.exists()
    assert live.exists() and other.exists() and elsewhere.exists()
