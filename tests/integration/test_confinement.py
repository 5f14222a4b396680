"""The operating system's confinement of commands, through the sandbox and the kernel."""

import dataclasses
import fcntl
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import ConfinementUnavailableError, SandboxRefusedError
from core_agent.contracts.tool import CallPermit, ToolContext
from core_agent.kernel.call_check import check_call
from providers.builtin_tools.commands import RunCommandArguments, RunCommandTool
from providers.sandbox import confinement, launcher, pids_cgroups
from providers.sandbox.confinement import (
    SYSTEM_HIDDEN_PATHS,
    CommandLimits,
    ProtectedEntrySearch,
    carved_paths,
    command_environment,
    command_policy,
)
from providers.sandbox.launcher_client import CommandLauncher, LauncherInfo
from providers.sandbox.local_sandbox import LocalToolSandbox
from providers.sandbox.program_paths import default_search_path, resolve_program
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ApprovalDecision,
    ChatMessage,
    TaskRequest,
    TaskStatus,
    ToolCompleted,
    ToolMessage,
)
from support.file_times import settle
from tests.adversarial.hostile_world import TcpSink

pytestmark = pytest.mark.anyio
CONNECT = "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"


@pytest.fixture
def listener():
    server = TcpSink()
    yield server
    server.close()


@pytest.fixture(params=["auto", "off"], ids=["namespaces", "landlock-only"])
async def sandbox(request, tmp_path: Path):
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    box = LocalToolSandbox(
        roots=[workspace],
        protected=[tmp_path / "data"],
        hidden=[tmp_path / "data"],
        command_timeout_s=10,
        namespaces=request.param,
    )
    yield box
    await box.close()


def leftovers(mark: str, wait_s: float = 2.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if mark in cmdline and state != "Z":
                found.append(int(entry.name))
        if not found or time.monotonic() > deadline:
            for pid in found:
                os.kill(pid, signal.SIGKILL)
            return found
        time.sleep(0.05)


async def test_only_a_network_permit_opens_tcp_and_never_unix_sockets(
    sandbox: LocalToolSandbox, listener: TcpSink, tmp_path: Path
) -> None:
    command = CONNECT.format(port=listener.port)
    refused = await sandbox.run_command(command)
    assert refused.exit_code != 0 and listener.hits == 0
    allowed = await sandbox.run_command(command, permit=CallPermit(network=True))
    assert allowed.exit_code == 0, allowed.stderr
    assert listener.settled(1) == 1
    unix = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(unix))
    server.listen()
    try:
        local = await sandbox.run_command(
            f"python3 -c 'import socket; socket.socket(1).connect(\"{unix}\")'",
            permit=CallPermit(network=True),
        )
    finally:
        server.close()
    assert local.exit_code != 0 and "Operation not permitted" in local.stderr


async def test_a_timeout_kills_everything_the_command_started(sandbox: LocalToolSandbox) -> None:
    result = await sandbox.run_command(
        "setsid sleep 5431 > /dev/null 2>&1 & sleep 5432", timeout_s=1
    )
    assert result.timed_out
    assert result.exit_code == -9  # the keeper killed it and reported so
    assert leftovers("sleep 543") == []


async def test_a_cancelled_call_kills_everything_the_command_started(
    sandbox: LocalToolSandbox,
) -> None:
    with anyio.move_on_after(1):
        await sandbox.run_command("(sleep 5433 &) ; sleep 5434")
    assert leftovers("sleep 543") == []


async def test_a_killed_keeper_leaves_no_process_behind_not_even_a_zombie(
    sandbox: LocalToolSandbox,
) -> None:
    # What the keeper leaves (the command and, in a PID namespace, its reaper; without one,
    # what the command left in the background) goes to the launcher, which kills it and
    # reaps it, rather than leave it running or to the host's init (which may never reap:
    # the namespace's end would then wait forever).
    results = []

    async def call() -> None:
        command = "(sleep 5436 &); sleep 5437"
        results.append(await sandbox.run_command(command, permit=CallPermit(write=True)))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        found = await anyio.to_thread.run_sync(processes_running, "sleep 5437", 5.0)
        assert found, "the command never started"
        keeper = parent_of(found[0])
        left = [*children_of(keeper), *processes_running("sleep 543")]
        os.kill(keeper, signal.SIGKILL)
    assert results[0].exit_code is not None
    assert still_there(left, wait_s=3.0) == []


def processes_running(mark: str, wait_s: float = 0.0) -> list[int]:
    """The processes whose command line holds ``mark``, waiting up to ``wait_s`` for one."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and mark in _cmdline(entry)
        ]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def still_there(pids: Sequence[int], wait_s: float) -> list[int]:
    """Those of ``pids`` still in /proc (zombies too) after up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while (left := [pid for pid in pids if Path(f"/proc/{pid}").exists()]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    return left


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])


def children_of(pid: int) -> list[int]:
    return [
        int(child)
        for thread in Path(f"/proc/{pid}/task").iterdir()
        for child in (thread / "children").read_text().split()
    ]


async def test_writes_follow_the_permit_and_never_reach_git_or_the_data_dir(
    sandbox: LocalToolSandbox, tmp_path: Path
) -> None:
    workspace = sandbox.paths.roots[0]
    (tmp_path / "data").mkdir()
    # Without namespaces a root holding .git takes no new entries itself (README, threat
    # model): the write below goes into an existing directory so both set-ups allow it.
    (workspace / "sub").mkdir()
    # Written through a program, so only the operating system stands in the way.
    write = (
        "python3 -c 'import sys\nfor p in sys.argv[1:]:\n"
        '  try: open(p, "w")\n  except OSError as e: print(e)\''
    )
    read_only = await sandbox.run_command(f"{write} sub.txt .git/hook")
    assert not (workspace / "sub.txt").exists()
    await sandbox.run_command(
        f"{write} sub/made.txt .git/hook {tmp_path}/data/x",
        permit=CallPermit(write=True),
    )
    assert (workspace / "sub" / "made.txt").exists()
    assert not (workspace / ".git" / "hook").exists()
    assert not (tmp_path / "data" / "x").exists()
    assert "Read-only file system" in read_only.stdout or "denied" in read_only.stdout


async def test_a_data_dir_inside_the_workspace_is_hidden(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    data = workspace / ".agent"
    data.mkdir(parents=True)
    (data / "core_agent.db").write_text("memories")
    box = LocalToolSandbox(roots=[workspace], protected=[data], hidden=[data])
    try:
        result = await box.run_command("cat .agent/core_agent.db", permit=CallPermit(write=True))
        listed = await box.list_files(".", limit=100)
        verdict = box.check_path(".agent/core_agent.db", capability="read")  # type: ignore[arg-type]
    finally:
        await box.close()
    assert "memories" not in result.stdout
    assert listed == []
    assert not verdict.allowed and "kernel's data" in verdict.reason


class NoLandlock(CommandLauncher):
    """A launcher on a machine whose kernel has no Landlock."""

    async def info(self) -> LauncherInfo:
        return LauncherInfo(pid=0, landlock_abi=0, namespaces=False, seccomp=False)


async def test_without_landlock_commands_are_refused_with_the_way_out(tmp_path: Path) -> None:
    box = LocalToolSandbox(roots=[tmp_path], launcher=NoLandlock())
    with pytest.raises(ConfinementUnavailableError, match="AGENT_SANDBOX_MODE=unconfined"):
        await box.run_command("ls")
    assert "no Landlock" in (await box.command_readiness() or "")
    container = KernelContainer()
    container.settings.override(container.settings().model_copy(update={"data_dir": tmp_path}))
    report = await check_call(
        tools=container.tool_registry(),
        policy=container.policy_engine(),
        sandbox=box,
        threshold=container.settings().policy_approval_required_risk,
        tool="run_command",
        arguments={"command": "ls"},
    )
    assert not report["would_run"] and "no Landlock" in report["sandbox"]["reason"]


async def test_a_machine_that_cannot_confine_is_told_once_as_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    box = LocalToolSandbox(roots=[tmp_path], launcher=NoLandlock())
    for _ in range(3):
        with pytest.raises(ConfinementUnavailableError):
            await box.run_command("ls")
    assert await box.command_readiness()
    told = [r for r in caplog.records if "commands are refused" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.WARNING
    assert "no Landlock" in told[0].getMessage()


class NoProcessLimit(CommandLauncher):
    """A launcher run by root where no pids cgroup can be made (a read-only cgroup fs)."""

    async def info(self) -> LauncherInfo:
        return dataclasses.replace(await super().info(), process_limit="none")


async def test_root_without_a_pids_cgroup_is_warned_once_and_commands_still_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    box = LocalToolSandbox(roots=[tmp_path], launcher=NoProcessLimit())
    try:
        results = [await box.run_command("echo 你好") for _ in range(3)]
    finally:
        await box.close()
    assert [r.stdout for r in results] == ["你好\n"] * 3
    assert "pids-cgroup" not in box.confinement
    told = [r for r in caplog.records if "without a process limit" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.WARNING


def runs(command: str):
    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        if any(isinstance(m, ToolMessage) for m in messages):
            return ScriptedTurn(content="done")
        return ScriptedTurn(
            tool_calls=[ScriptedToolCall(name="run_command", arguments={"command": command})]
        )

    return model


async def test_no_human_is_asked_to_approve_a_command_that_cannot_run_here(
    tmp_path: Path,
) -> None:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": tmp_path / "data", "workspace_roots": (tmp_path,)}
        )
    )
    container.sandbox.override(LocalToolSandbox(roots=[tmp_path], launcher=NoLandlock()))
    # "make build" is not on the allowlist: it needs a human, who would approve in vain.
    container.llm_gateway.override(ScriptedLLMGateway(policy=runs("make build")))
    kernel = container.kernel()
    asked: list[object] = []
    kernel.set_approval_callback(lambda request: asked.append(request))
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="build", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    assert asked == []
    (completed,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert completed.result.is_error and "no Landlock" in completed.result.content
    assert not [e for e in events if e.kind == "approval.requested"]


async def test_the_opt_out_is_warned_about_and_on_every_tool_span(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": tmp_path / "data",
                "workspace_roots": (tmp_path,),
                "sandbox_mode": "unconfined",
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=runs("ls")))
    with caplog.at_level(logging.WARNING):
        kernel = container.kernel()
    assert "AGENT_SANDBOX_MODE=unconfined" in caplog.text
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="list", force_mode="react"))
        spans = await kernel.task_spans(result.task_id)
    (tool_span,) = [s for s in spans if s.kind == "tool"]
    assert tool_span.attributes["confinement"] == "unconfined"


HOST_READING_STDIN = """
import sys, anyio
from pathlib import Path
from providers.sandbox.local_sandbox import LocalToolSandbox

async def main() -> None:
    box = LocalToolSandbox(roots=[Path(sys.argv[1])], mode=sys.argv[2])
    try:
        result = await box.run_command("head -c 20", timeout_s=10)
    finally:
        await box.close()
    print(repr(result.stdout), result.exit_code, repr(sys.stdin.read()))

anyio.run(main)
"""


HOST_LEFT_IN_A_COMMAND = """
import sys, anyio
from pathlib import Path
from providers.sandbox.local_sandbox import LocalToolSandbox

def children() -> list[str]:
    # What runs below the host besides the sandbox's own launcher.
    tasks = Path("/proc/self/task")
    pids = [pid for task in tasks.iterdir() for pid in (task / "children").read_text().split()]
    lines = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\\0", b" ") for pid in pids]
    return [line.decode() for line in lines if b"launcher" not in line]

async def main() -> None:
    box = LocalToolSandbox(roots=[Path(sys.argv[1])], mode=sys.argv[2])
    await box.run_command("true")
    print("children after a command:", children(), flush=True)
    await box.run_command(f"sleep {sys.argv[3]} && echo done", timeout_s=600)

anyio.run(main)
"""


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in line and b"HOST_LEFT" not in line and b"import" not in line:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("mode", ["confined", "unconfined"])
def test_a_commands_processes_die_with_a_host_killed_mid_command(tmp_path: Path, mode: str) -> None:
    # The host is killed (SIGKILL: no cleanup of its own runs) while a command runs: the
    # command and what it started must not live on, to act beside the task's recovery.
    marker = f"3600.{os.getpid()}{len(mode)}7"
    with subprocess.Popen(
        [sys.executable, "-c", HOST_LEFT_IN_A_COMMAND, str(tmp_path), mode, marker],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as host:
        try:
            assert host.stdout is not None
            # A command that ended leaves nothing behind (its watcher included).
            assert host.stdout.readline().strip() == "children after a command: []"
            deadline = time.monotonic() + 30
            while len(processes_with(marker)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(processes_with(marker)) == 2  # bash and its sleep
        finally:
            host.kill()
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes_with(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


@pytest.mark.parametrize("mode", ["confined", "unconfined"])
def test_a_command_never_reads_its_hosts_input(tmp_path: Path, mode: str) -> None:
    # A host over stdio (`core-agent serve --stdio`) gets its requests on its standard input;
    # a command that reads its own (`head`, `cat`, a prompt) must not take them: unconfined,
    # it inherited the host's and read the next request.
    host = subprocess.run(
        [sys.executable, "-c", HOST_READING_STDIN, str(tmp_path), mode],
        input="the host's next request\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert host.returncode == 0, host.stderr
    assert host.stdout.strip() == "'' 0 \"the host's next request\\n\""


async def test_a_policy_rule_can_open_the_network_to_an_approved_command(
    tmp_path: Path, listener: TcpSink
) -> None:
    rules = tmp_path / "policy.toml"
    rules.write_text(
        '[[rule]]\nname = "local-service"\ntools = ["run_command"]\n'
        'commands = ["python3 -c *"]\nrisk = "high"\nnetwork = true\n'
    )
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": tmp_path / "data",
                "workspace_roots": (tmp_path,),
                "policy_file": rules,
            }
        )
    )
    command = CONNECT.format(port=listener.port)
    container.llm_gateway.override(ScriptedLLMGateway(policy=runs(command)))
    kernel = container.kernel()
    kernel.set_approval_callback(
        lambda request: ApprovalDecision(request_id=request.request_id, approved=True)
    )
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="ping", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED
    assert listener.settled(1) == 1
    decided = next(e for e in events if e.kind == "policy.decided")
    assert decided.rule == "local-service"
    completed = next(e for e in events if e.kind == "tool.completed")
    assert "exit code: 0" in completed.result.content, json.dumps(completed.result.content)


async def test_a_deep_chain_of_process_groups_is_killed_whole(
    sandbox: LocalToolSandbox,
) -> None:
    # Each level in a process group of its own, so killing groups reaches one level at a time.
    chain = (
        "python3 -c 'import os, time\n"
        "for _ in range(400):\n"
        "    os.setpgid(0, 0)\n"
        "    if os.fork(): time.sleep(1000)\n"
        'os.execvp("sleep", ["sleep", "5436"])\' & sleep 2; echo started'
    )
    result = await sandbox.run_command(chain, permit=CallPermit(write=True))
    assert "started" in result.stdout
    assert leftovers("sleep 5436") == []
    assert leftovers("import os, time") == []


FORK_SLEEPERS = (
    "python3 -c 'import os, time\n"
    "forked = 0\n"
    "for _ in range(1000):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(20); os._exit(0)\n"
    "    forked += 1\n"
    'print("forked", forked)\''
)


def sandbox_of_40_processes(tmp_path: Path, namespaces: str) -> LocalToolSandbox:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return LocalToolSandbox(
        roots=[workspace],
        command_timeout_s=30,
        namespaces=namespaces,
        limits=CommandLimits(processes=40),
    )


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_a_command_cannot_start_more_processes_than_its_limit(
    tmp_path: Path, namespaces: str
) -> None:
    # Linux exempts root from RLIMIT_NPROC: as root (this suite in CI) only the command's
    # pids cgroup holds the line; as another user the rlimit does.
    box = sandbox_of_40_processes(tmp_path, namespaces)
    try:
        result = await box.run_command(FORK_SLEEPERS, permit=CallPermit(write=True))
        again = await box.run_command(FORK_SLEEPERS, permit=CallPermit(write=True))
        layers = box.confinement
        launcher_pid = (await box._launcher.info()).pid
    finally:
        await box.close()
    # The command itself is one of the 40. RLIMIT_NPROC counts the user's processes, so
    # as another user the launcher's next spare (and, in namespaces, the keeper) count too.
    expected = {"39"} if os.geteuid() == 0 else {"37", "38", "39"}
    for run in (result, again):  # the second: the limit is per command, not shared
        assert run.stdout.split()[0] == "forked", (run.stdout, run.stderr)
        assert run.stdout.split()[1] in expected, (run.stdout, run.stderr)
    assert ("pids-cgroup" in layers) == (os.geteuid() == 0), layers
    assert leftovers("time.sleep(20)", wait_s=2.0) == []
    if os.geteuid() == 0:
        assert launcher_cgroups_removed(launcher_pid)


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_background_jobs_that_come_and_go_do_not_use_up_the_limit(
    tmp_path: Path, namespaces: str
) -> None:
    # Each job outlives the subshell that started it, so it ends as somebody's orphan; its
    # zombie would count against the 40 processes until reaped.
    box = sandbox_of_40_processes(tmp_path, namespaces)
    try:
        result = await box.run_command(
            "for i in $(seq 120); do (sleep 0.005 &); sleep 0.01; done; echo finished",
            permit=CallPermit(write=True),
        )
    finally:
        await box.close()
    assert result.stdout.strip() == "finished" and not result.timed_out, result
    assert result.stderr == "", result.stderr


NEVER_WAITS = (
    "python3 -c 'import os, time\n"
    "for _ in range(120):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(0.005)\n"
    "        os._exit(0)\n"
    "    os.waitpid(pid, 0)\n"
    "    time.sleep(0.002)\n"
    'print("finished")\''
)


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_orphans_of_a_program_that_never_waits_do_not_use_up_the_limit(
    tmp_path: Path, namespaces: str
) -> None:
    # The program waits for its children, never for the grandchildren they leave behind:
    # those end as orphans of whoever reaps for the command. In a PID namespace that is its
    # first process; were it the program itself (which never waits for them), 40 zombies
    # would stop it.
    box = sandbox_of_40_processes(tmp_path, namespaces)
    try:
        result = await box.run_command(NEVER_WAITS, permit=CallPermit(write=True))
    finally:
        await box.close()
    assert result.stdout.strip() == "finished" and not result.timed_out, result
    assert result.stderr == "", result.stderr


async def test_clone3_is_refused_so_no_child_is_started_in_another_cgroup(
    sandbox: LocalToolSandbox,
) -> None:
    # clone3's CLONE_INTO_CGROUP names a cgroup v2 by an O_PATH descriptor, which Landlock
    # does not check: a command could start children outside its pids cgroup. With an empty
    # argument the real call answers EINVAL (22); refused, ENOSYS (38), and libc uses clone.
    probe = (
        "python3 -c 'import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.syscall(435, 0, 0), ctypes.get_errno())\n"
        "pid = os.fork()\n"
        'os._exit(0) if pid == 0 else print("forked", os.waitpid(pid, 0)[1])\''
    )
    result = await sandbox.run_command(probe, permit=CallPermit(write=True))
    assert result.stdout.split() == ["-1", "38", "forked", "0"], (result.stdout, result.stderr)


def launcher_cgroups_removed(launcher_pid: int) -> bool:
    """Whether the launcher's pids cgroups are gone (it removes them when it ends)."""
    hierarchy = pids_cgroups.parse_hierarchy(
        Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text()
    )
    assert hierarchy is not None
    pattern = f"{pids_cgroups.PREFIX}{launcher_pid}-*"
    deadline = time.monotonic() + 2
    while list(Path(hierarchy.own).glob(pattern)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not list(Path(hierarchy.own).glob(pattern))


async def test_a_sibling_made_with_clone_parent_is_refused(sandbox: LocalToolSandbox) -> None:
    # clone(CLONE_PARENT) would make a child of the keeper, out of the namespace reaper's
    # reach, which the namespace's end then waited for: the keeper hung past every timeout.
    probe = (
        "python3 -c 'import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)\n"
        "os._exit(0) if pid == 0 else print(pid, ctypes.get_errno())'"
    )
    result = await sandbox.run_command(probe, permit=CallPermit(write=True), timeout_s=5)
    assert not result.timed_out and result.exit_code == 0, result
    assert result.stdout.split() == ["-1", "1"]  # EPERM


async def test_a_command_traced_by_its_own_child_still_ends_with_its_code(
    sandbox: LocalToolSandbox,
) -> None:
    # Its exit status goes to the tracer first: the keeper waiting for it waited for the
    # tracer, which kept running past the command's end, its timeout and the sandbox's close.
    traced = (
        "python3 -c 'import ctypes, os, time\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.close(w); libc = ctypes.CDLL(None, use_errno=True)\n"
        '    print("seized", libc.ptrace(0x4206, os.getppid(), 0, 0), flush=True)\n'
        "    os.close(1); os.close(2); os.read(r, 1); time.sleep(5438)\n"
        "time.sleep(0.5); os._exit(3)'"
    )
    result = await sandbox.run_command(traced, permit=CallPermit(write=True), timeout_s=5)
    assert not result.timed_out and result.exit_code == 3, result
    assert result.stdout.split() == ["seized", "0"]
    assert leftovers("sleep(5438)") == []


async def test_a_fork_storm_is_killed_whole(sandbox: LocalToolSandbox) -> None:
    # Loops that fork and let the parent exit at once, each in a session of its own: a walk
    # of the process tree is always a step behind them. (They stop on their own after 6 s.)
    storm = (
        "python3 -c 'import os, time\n"
        'mark = "storm5437"; end = time.time() + 6\n'
        "for _ in range(60):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        while time.time() < end:\n"
        "            if os.fork(): os._exit(0)\n"
        "        os._exit(0)\n"
        "' ; sleep 1; echo started"
    )
    result = await sandbox.run_command(storm, permit=CallPermit(write=True))
    assert "started" in result.stdout, result.stderr
    assert leftovers("storm5437", wait_s=0.5) == []


async def test_the_command_cannot_stop_or_kill_its_keeper(sandbox: LocalToolSandbox) -> None:
    # In a PID namespace the keeper is out of sight (the parent pid reads 0: killing "0"
    # would be the command's own process group); without one, Landlock refuses the signal.
    for signal_name in ("-9", "-STOP"):
        result = await sandbox.run_command(
            "(setsid sleep 5435 > /dev/null 2>&1 &); sleep 0.3; "
            f'if [ "$PPID" = 0 ]; then echo unseen; else kill {signal_name} $PPID; fi; '
            "echo sent=$?",
            permit=CallPermit(write=True),
            timeout_s=5,
        )
        assert result.exit_code is not None and not result.timed_out
        assert "sent=" in result.stdout, (result.stdout, result.stderr)
        assert leftovers("sleep 543") == []


async def test_the_command_inherits_no_socket_of_its_keeper(sandbox: LocalToolSandbox) -> None:
    forged = await sandbox.run_command(
        'ls -l /proc/self/fd; printf \'{"exit": 0}\' >&3; printf \'{"setup_error": "x"}\' >&3',
        permit=CallPermit(write=True),
    )
    assert "socket:" not in forged.stdout
    assert forged.exit_code != 0  # its own failure, not a forged report


async def test_metadata_changes_do_not_slip_past_the_filter(
    sandbox: LocalToolSandbox, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("x")
    victim.chmod(0o600)
    setxattrat = (
        "python3 -c 'import ctypes,os; libc=ctypes.CDLL(None, use_errno=True)\n"
        'class A(ctypes.Structure): _fields_=[("v",ctypes.c_void_p),("s",ctypes.c_uint32),'
        '("f",ctypes.c_uint32)]\n'
        'b=b"x"; a=A(ctypes.cast(ctypes.c_char_p(b),ctypes.c_void_p),1,0)\n'
        f'r=libc.syscall(463,-100,b"{victim}",0,b"user.pwned",ctypes.byref(a),'
        "ctypes.sizeof(a)); print(r, ctypes.get_errno())'"
    )
    await sandbox.run_command(setxattrat, permit=CallPermit(write=True))
    await sandbox.run_command(f"touch -d 2001-01-01 {victim}", permit=CallPermit(write=True))
    config = sandbox.paths.roots[0] / ".git" / "config"
    config.write_text("[core]\n")
    await sandbox.run_command(f"python3 -c '{SET_NODUMP}' .git/config")
    generation = inode_generation(config)
    await sandbox.run_command(f"python3 -c '{SET_GENERATION}' .git/config")
    assert victim.stat().st_mtime > 1e9 + 3e8  # not moved to 2001
    assert "user.pwned" not in os.listxattr(victim)
    assert not inode_flags(config) & NODUMP  # chattr +d on a file it may only read
    assert inode_generation(config) == generation


SET_NODUMP = (
    "import fcntl, os, struct, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
    'fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x40))'
)
NODUMP = 0x40
SET_GENERATION = (
    "import fcntl, os, struct, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
    'fcntl.ioctl(fd, 0x40087602, struct.pack("l", 12345))'
)


def inode_generation(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        value = fcntl.ioctl(fd, 0x80087601, struct.pack("l", 0))  # FS_IOC_GETVERSION
    finally:
        os.close(fd)
    return int(struct.unpack("l", value)[0])


def inode_flags(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = fcntl.ioctl(fd, 0x80086601, struct.pack("l", 0))  # FS_IOC_GETFLAGS
    finally:
        os.close(fd)
    return int(struct.unpack("l", flags)[0])


def test_this_file_system_keeps_inode_flags(tmp_path: Path) -> None:
    # What the check above relies on: without confinement the flag sticks.
    probe = tmp_path / "probe"
    probe.write_text("x")
    subprocess.run([sys.executable, "-c", SET_NODUMP, str(probe)], check=True)
    subprocess.run([sys.executable, "-c", SET_GENERATION, str(probe)], check=True)
    assert inode_flags(probe) & NODUMP
    assert inode_generation(probe) == 12345


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_a_protected_path_cannot_be_carried_away_by_renaming_its_parent(
    tmp_path: Path, namespaces: str
) -> None:
    workspace = tmp_path / "ws"
    data = workspace / "state" / "agent"
    data.mkdir(parents=True)
    (data / "core_agent.db").write_text("DB-SECRET")
    policy = workspace / "config" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text("# the user's rules\n")
    # The judge is off: only the operating system stands in the way.
    box = LocalToolSandbox(
        roots=[workspace],
        protected=[data, policy],
        hidden=[data],
        judge_commands=False,
        namespaces=namespaces,  # type: ignore[arg-type]
    )
    try:
        moved = await box.run_command(
            "mv state state.old; mkdir -p state/agent; cat state.old/agent/core_agent.db; "
            "mv config config.old; mkdir config; echo 'rules: none' > config/policy.toml",
            permit=CallPermit(write=True),
        )
    finally:
        await box.close()
    assert "DB-SECRET" not in moved.stdout
    assert (data / "core_agent.db").read_text() == "DB-SECRET"
    assert policy.read_text() == "# the user's rules\n"


def readable_system_secrets() -> list[str]:
    return [
        path
        for path in SYSTEM_HIDDEN_PATHS
        if (os.path.isfile(path) and os.access(path, os.R_OK))
        or (os.path.isdir(path) and os.listdir(path))
    ]


def secrets_by_kind() -> tuple[list[str], list[str]]:
    found = readable_system_secrets()
    return [p for p in found if os.path.isfile(p)], [p for p in found if os.path.isdir(p)]


async def test_system_secrets_stay_unreadable_to_every_command(tmp_path: Path) -> None:
    readable = readable_system_secrets()
    assert readable, "no system secret readable here: the test would prove nothing"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    reads = " ".join(f"cat {path} {path}/* {path}/*/*;" for path in readable)
    listings = " ".join(f"ls -A {path}/;" for path in readable)
    for namespaces in ("auto", "off"):
        box = LocalToolSandbox(
            roots=[workspace],
            judge_commands=False,
            namespaces=namespaces,  # type: ignore[arg-type]
        )
        try:
            for permit in (CallPermit(), CallPermit(write=True)):
                result = await box.run_command(f"{reads} echo done", permit=permit)
                assert result.stdout.strip() == "done", (namespaces, permit, result.stdout)
                if namespaces == "auto":
                    # Under an empty mount even the names are gone (without namespaces,
                    # Landlock leaves a hidden directory's names listable: README).
                    listed = await box.run_command(f"{listings} echo done", permit=permit)
                    assert listed.stdout.strip() == "done", (permit, listed.stdout)
        finally:
            await box.close()


async def test_requests_of_every_shape_run_one_after_another(tmp_path: Path) -> None:
    # Keepers are forked ahead of their requests, inside the namespaces the last one needed;
    # a request that needs others gets a keeper of its own, and each gets its own limits.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    listener = TcpSink()
    launcher = CommandLauncher()
    search_path = default_search_path([workspace])
    python = resolve_program("python3", search_path)
    assert python is not None
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), 2)"
    try:
        shapes = [
            (namespaces, network, filtered)
            for namespaces in (True, False)
            for network in (False, True)
            for filtered in (True, False)
        ]
        for namespaces, network, filtered in shapes * 2:
            policy = command_policy(
                program=python,
                argv=["python3", "-c", connect],
                cwd=workspace,
                environment=command_environment(search_path, str(workspace)),
                roots=[workspace],
                carved=carved_paths([workspace], [], [], ()),
                temporary=str(workspace),
                writable=False,
                network=network,
                namespaces=namespaces,
                search_path=search_path,
            )
            policy["seccomp"] = filtered
            hits = listener.hits
            process = await launcher.spawn(policy)
            code = await process.wait()
            process.close()
            shape = (namespaces, network, filtered)
            assert (code == 0) is network, shape
            expected = hits + (1 if network else 0)
            assert listener.settled(expected) == expected, shape
    finally:
        await launcher.close()
        listener.close()


async def test_a_command_allowed_the_network_can_read_where_the_resolver_config_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # systemd-resolved and NetworkManager make /etc/resolv.conf a link into /run.
    target = tmp_path / "run" / "stub-resolv.conf"
    target.parent.mkdir()
    target.write_text("nameserver 127.0.0.53\n")
    link = tmp_path / "resolv.conf"
    link.symlink_to(target)
    monkeypatch.setattr(confinement, "RESOLVER_FILES", (str(link),))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = LocalToolSandbox(roots=[workspace], judge_commands=False)
    try:
        offline = await box.run_command(f"cat {link}")
        online = await box.run_command(f"cat {link}", permit=CallPermit(network=True))
    finally:
        await box.close()
    assert "nameserver" not in offline.stdout
    assert online.stdout == "nameserver 127.0.0.53\n", online.stderr


async def test_a_file_added_to_a_split_system_directory_is_readable_at_once(
    tmp_path: Path,
) -> None:
    # Extra read paths are planned like /etc: split around what is hidden below them, with
    # the plan cached by the launcher. A new entry must not wait for the cache to expire.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "secret.key").write_text("KEY")
    (shared / "old.txt").write_text("old")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = LocalToolSandbox(
        roots=[workspace],
        hidden=[shared / "secret.key"],
        read_paths=[shared],
        judge_commands=False,
    )
    try:
        first = await box.run_command(f"cat {shared}/old.txt {shared}/secret.key")
        (shared / "new.txt").write_text("new")
        (shared / "old.txt").unlink()
        (shared / "old.txt").write_text("replaced")
        second = await box.run_command(f"cat {shared}/new.txt {shared}/old.txt")
        third = await box.run_command(f"cat {shared}/secret.key")
    finally:
        await box.close()
    assert first.stdout == "old" and "KEY" not in first.stdout
    assert second.stdout == "newreplaced", second.stderr
    assert "KEY" not in third.stdout


def test_the_launchers_plan_cache_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = tmp_path / "system"
    system.mkdir()
    for index in range(50):
        (system / f"entry{index}").write_text("x")
    monkeypatch.setattr(launcher, "MAX_CACHED_DESCRIPTORS", 200)
    grants = launcher.SystemGrants()
    opened_before = len(os.listdir("/proc/self/fd"))
    for index in range(40):
        # A different hidden entry each time: a plan of its own each time (~50 descriptors).
        grants.prepared(
            {"system_read": [str(system)], "carved": {str(system / f"entry{index}"): "hidden"}}
        )
    held = len(os.listdir("/proc/self/fd")) - opened_before
    assert 0 < held <= 200 + 60


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_a_git_link_to_a_secret_does_not_unhide_it(tmp_path: Path, namespaces: str) -> None:
    files, directories = secrets_by_kind()
    assert files and directories, "needs a readable secret file and directory (run as root)"
    secret_file, secret_dir = files[0], directories[0]
    workspace = tmp_path / "ws"
    other = tmp_path / "other"
    workspace.mkdir()
    other.mkdir()
    (other / ".git").write_text(f"gitdir: {secret_dir}\n")  # a worktree-style pointer
    # The judge is off: only the operating system stands in the way.
    box = LocalToolSandbox(
        roots=[workspace, other],
        judge_commands=False,
        namespaces=namespaces,  # type: ignore[arg-type]
    )
    try:
        await box.run_command(f"ln -s {secret_file} .git", permit=CallPermit(write=True))
        assert (workspace / ".git").is_symlink()
        later = await box.run_command(
            f"cat {secret_file} {secret_dir}/* .git; echo done", permit=CallPermit(write=True)
        )
    finally:
        await box.close()
    assert later.stdout.strip() == "done", later.stdout


async def test_protection_that_cannot_be_mounted_does_not_stop_work_beside_it(
    tmp_path: Path,
) -> None:
    # A protected path that does not exist yet, and a .git that is a link to the real one:
    # neither can carry a mount, and carving them out with Landlock would forbid every new
    # entry in the workspace root. The link's target is protected through its own entry.
    workspace = tmp_path / "ws"
    (workspace / "realgit").mkdir(parents=True)
    (workspace / "realgit" / "config").write_text("[core]\n")
    (workspace / ".git").symlink_to("realgit")
    (workspace / "notes.txt").write_text("old")
    box = LocalToolSandbox(
        roots=[workspace],
        protected=[workspace / "policy.toml"],
        judge_commands=False,
        namespaces="auto",
    )
    try:
        result = await box.run_command(
            "touch new.txt && mv notes.txt renamed.txt && echo x >> realgit/config",
            permit=CallPermit(write=True),
        )
    finally:
        await box.close()
    assert (workspace / "new.txt").exists() and (workspace / "renamed.txt").exists()
    assert (workspace / "realgit" / "config").read_text() == "[core]\n", result.stderr


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_a_nested_repository_stays_read_only_like_the_roots_own(
    tmp_path: Path, namespaces: str
) -> None:
    workspace = tmp_path / "ws"
    git("init", "-q", str(workspace))
    git("init", "-q", str(workspace / "sub"))
    git("init", "-q", str(workspace / "deep" / "a" / "b"))
    (workspace / "sub" / "notes.txt").write_text("old")
    # A submodule's (or worktree's) .git is a file naming the repository elsewhere.
    (workspace / "modgit").mkdir()
    (workspace / "modgit" / "config").write_text("[core]\n")
    (workspace / "mod").mkdir()
    (workspace / "mod" / ".git").write_text("gitdir: ../modgit\n")
    (workspace / "other").mkdir()
    configs = {
        path: path.read_text()
        for path in (
            workspace / "sub" / ".git" / "config",
            workspace / "deep" / "a" / "b" / ".git" / "config",
            workspace / "modgit" / "config",
            workspace / "mod" / ".git",
        )
    }
    # The judge is off: only the operating system stands in the way.
    box = LocalToolSandbox(
        roots=[workspace],
        judge_commands=False,
        namespaces=namespaces,  # type: ignore[arg-type]
    )
    try:
        result = await box.run_command(
            "printf '#!/bin/sh\\necho PWNED\\n' > sub/.git/hooks/pre-commit; "
            "git -C sub config core.fsmonitor 'echo FSMON'; "
            "echo '[core] fsmonitor = x' >> deep/a/b/.git/config; "
            "echo '[core] fsmonitor = x' >> modgit/config; "
            "echo 'gitdir: /tmp' > mod/.git; "
            "mv sub sub.old; mv deep/a deep/z; "
            "echo new >> sub/notes.txt; echo made > other/made.txt",
            permit=CallPermit(write=True),
        )
    finally:
        await box.close()
    assert not (workspace / "sub" / ".git" / "hooks" / "pre-commit").exists(), result.stderr
    assert {path: path.read_text() for path in configs} == configs, result.stderr
    assert not (workspace / "sub.old").exists() and not (workspace / "deep" / "z").exists()
    # Work beside the repositories goes on.
    assert (workspace / "sub" / "notes.txt").read_text() == "oldnew\n"
    assert (workspace / "other" / "made.txt").read_text() == "made\n"


@pytest.mark.parametrize("namespaces", ["auto", "off"])
async def test_a_repository_a_command_makes_is_reported_and_read_only_from_then_on(
    tmp_path: Path, namespaces: str
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "work").mkdir(parents=True)
    box = LocalToolSandbox(
        roots=[workspace],
        judge_commands=False,
        namespaces=namespaces,  # type: ignore[arg-type]
    )
    context = ToolContext(
        task_id="t", session_id="s", call_id="c", sandbox=box, permit=CallPermit(write=True)
    )
    try:
        # Landlock cannot refuse a name: the command can make a repository with a hook.
        made = await RunCommandTool().execute(
            RunCommandArguments(command="git init -q work/new && git -C work/new config a.b c"),
            context,
        )
        quiet = await RunCommandTool().execute(
            RunCommandArguments(command="echo x > work/plain.txt"), context
        )
        later = await box.run_command(
            "git -C work/new config core.fsmonitor 'echo FSMON'", permit=CallPermit(write=True)
        )
    finally:
        await box.close()
    assert f"warning: the command made {workspace}/work/new/.git" in made
    assert "warning" not in quiet
    assert later.exit_code != 0
    assert "fsmonitor" not in (workspace / "work" / "new" / ".git" / "config").read_text()


@pytest.mark.parametrize("namespaces", ["auto", "off"])
@pytest.mark.parametrize("margin", ["none", "as shipped"])
async def test_a_repository_made_under_a_remembered_directory_is_read_only_for_the_next_command(
    tmp_path: Path, namespaces: str, margin: str
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "notes.txt").write_text("old\n")
    (workspace / "other").mkdir()
    box = LocalToolSandbox(
        roots=[workspace],
        judge_commands=False,
        namespaces=namespaces,  # type: ignore[arg-type]
    )
    if margin == "none":  # the listings are remembered at once, so the next search uses them
        box.protected_search = ProtectedEntrySearch(box.paths.roots, racy_margin_ns=0)
        settle(workspace)
    mtime = os.lstat(workspace / "sub").st_mtime_ns
    write = CallPermit(write=True)
    try:
        warm = await box.run_command("echo x > other/x", permit=write)
        remembered = box.protected_search.remembered
        # A new repository with a hook directory, its directory's mtime set back as it was
        # (without namespaces a command cannot change times: only the repository is made).
        made = await box.run_command(
            f"mkdir -p sub/.git/hooks; touch -d @{mtime // 10**9}.{mtime % 10**9:09d} sub",
            permit=write,
        )
        if namespaces == "auto":
            assert os.lstat(workspace / "sub").st_mtime_ns == mtime, made.stderr
        later = await box.run_command(
            "printf '#!/bin/sh\\necho PWNED\\n' > sub/.git/hooks/post-checkout; "
            "echo '[core] fsmonitor = x' > sub/.git/config",
            permit=write,
        )
        beside = await box.run_command("echo new >> sub/notes.txt", permit=write)
    finally:
        await box.close()
    assert warm.exit_code == 0 and remembered == (3 if margin == "none" else 0)
    assert made.warnings == (
        f"the command made {workspace}/sub/.git: git trusts it as a repository, and its hooks "
        "and config (which run programs) came from the command, not from you. Later commands "
        "cannot change it; check it (or remove it) before you run git there.",
    )
    assert later.exit_code != 0
    assert not (workspace / "sub" / ".git" / "hooks" / "post-checkout").exists()
    assert not (workspace / "sub" / ".git" / "config").exists()
    assert beside.exit_code == 0 and (workspace / "sub" / "notes.txt").read_text() == "old\nnew\n"


async def test_a_workspace_too_large_to_search_for_repositories_refuses_writes_not_reads(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    for index in range(confinement.MAX_SCANNED_DIRECTORIES + 1):
        (workspace / f"d{index // 100}" / f"e{index % 100}").mkdir(parents=True, exist_ok=True)
    box = LocalToolSandbox(roots=[workspace], judge_commands=False)
    try:
        read = await box.run_command("ls d0")
        with pytest.raises(SandboxRefusedError, match=r"too many to find every \.git"):
            await box.run_command("touch d0/x", permit=CallPermit(write=True))
    finally:
        await box.close()
    assert "e99" in read.stdout
    assert not (workspace / "d0" / "x").exists()


async def test_installed_dependencies_are_not_searched_for_repositories(tmp_path: Path) -> None:
    # A project's node_modules or virtual environment holds most of its directories; counted,
    # they refused every command that writes in an ordinary project.
    workspace = tmp_path / "ws"
    for index in range(confinement.MAX_SCANNED_DIRECTORIES + 1):
        (workspace / "node_modules" / f"p{index // 100}" / f"d{index % 100}").mkdir(
            parents=True, exist_ok=True
        )
    (workspace / "src").mkdir()
    box = LocalToolSandbox(roots=[workspace], judge_commands=False)
    try:
        done = await box.run_command("touch src/x", permit=CallPermit(write=True))
    finally:
        await box.close()
    assert done.exit_code == 0 and (workspace / "src" / "x").exists()


async def test_too_many_repositories_to_keep_read_only_refuse_writes_not_reads(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    for index in range(confinement.MAX_PROTECTED_ENTRIES + 1):
        (workspace / f"r{index}" / ".git").mkdir(parents=True)
    box = LocalToolSandbox(roots=[workspace], judge_commands=False)
    try:
        read = await box.run_command("ls r0")
        with pytest.raises(SandboxRefusedError, match=r"holds 257 \.git entries"):
            await box.run_command("touch r0/x", permit=CallPermit(write=True))
    finally:
        await box.close()
    assert read.exit_code == 0
    assert not (workspace / "r0" / "x").exists()
