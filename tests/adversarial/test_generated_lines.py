"""Generated shell lines: whatever the judge lets run on its own does nothing it should not.

Hypothesis strings together allowed programs, hostile ones, options that write or execute,
paths inside and outside, substitutions, expansions, assignments, redirections and
operators. For every line:

* with the judge on, a line that runs without approval runs with the permit the judge gave
  it, and must change nothing outside the workspace, nothing in the workspace unless it was
  judged a write, reach no sink and print no secret;
* with the judge off, every line runs with workspace writes, and the operating system alone
  must hold the same limits outside the workspace.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial.hostile_world import HostileWorld, written_entries
from core_agent.contracts.settings import DEFAULT_ALLOWED_COMMANDS
from core_agent.contracts.tool import CallPermit
from providers.sandbox.confinement import CommandLimits
from providers.sandbox.local_sandbox import LocalToolSandbox

pytestmark = pytest.mark.anyio

LIMITS = CommandLimits(cpu_seconds=10, data_bytes=256 << 20, file_bytes=8 << 20, processes=64)
ALLOWED = [
    "ls",
    "ls -la",
    "cat",
    "echo",
    "grep -r x",
    "grep -f",
    "sort",
    "sort -k 1",
    "uniq",
    "head -n 1",
    "tail -c 10",
    "wc -l",
    "cut -d , -f 1",
    "diff",
    "stat",
    "file",
    "du -s",
    "date",
    "git log -n 1",
    "git diff",
    "git show",
    "git status",
    "git branch",
    "git rev-parse",
    "git -C src log",
]
HOSTILE = [
    "touch {outside}/gen-touch",
    "touch gen-touch",
    'python3 -c \'open("{outside}/gen-py","w")\'',
    "sh -c 'echo x > {outside}/gen-sh'",
    "env",
    "bin/cat",
    "tee {outside}/gen-tee",
    "cp README.md {outside}/gen-cp",
]
PROGRAMS = ALLOWED * 3 + HOSTILE
ARGUMENTS = [
    "README.md",
    "README.md",
    "src/app.py",
    "src/app.py",
    "src",
    "*.md",
    "src/*.py",
    "-o",
    "-o{outside}/gen-o2",
    "-rno{outside}/gen-o3",
    "--out={outside}/gen-out",
    "--outp=.git/config",
    "--ext-diff",
    "--output=.git/gen",
    "-s 2001-01-01",
    "-C",
    "--pre=sh",
    "-T {outside}",
    "-z",
    "-D main",
    "newbranch",
    "{outside}",
    "gen-second-operand",
    "../outside.txt",
    "{outside}/secret.txt",
    "{home}/.aws/credentials",
    "{data}/notes.txt",
    ".git/config",
    "~/.bashrc",
    "-o {outside}/gen-o",
    "--output={outside}/gen-output",
    "--compress-program=sh",
    "-n 1",
    "'quoted arg'",
    "*.md",
    "{{a,b}}",
    "$HOME",
    "$(touch gen-subst)",
    "`touch {outside}/gen-backtick`",
    "$((1+1))",
    "/proc/{victim}/environ",
    "/proc/{kernel}/fd/{held}",
]
REDIRECTS = [
    "",
    "",
    "> gen-out.txt",
    ">> {outside}/gen-append",
    "2>&1",
    "> /dev/null",
    "< README.md",
    "<<< $(touch gen-herestring)",
    "> .git/gen-git",
    "> /dev/tcp/127.0.0.1/{tcp}",
]
PREFIXES = ["", "", "", "X=$(touch gen-assign) ", "LANG=C ", "GIT_DIR=. "]
# Where bash and a grammar may part ways: a newline before an escaped word, a carriage return
# before a comment, here-documents with the rest of the line hanging on them, escaped blanks.
SEPARATORS = [" | ", " && ", " || ", "; ", " & ", "\n\\", " \r# ; ", " <<EOF | ", " \\ "]

simple_commands = st.builds(
    lambda prefix, program, arguments, redirect: " ".join(
        part for part in (prefix + program, *arguments, redirect) if part
    ),
    st.sampled_from(PREFIXES),
    st.sampled_from(PROGRAMS),
    st.lists(st.sampled_from(ARGUMENTS), max_size=3),
    st.sampled_from(REDIRECTS),
)
lines = st.builds(
    lambda first, rest: first + "".join(sep + command for sep, command in rest),
    simple_commands,
    st.lists(st.tuples(st.sampled_from(SEPARATORS), simple_commands), max_size=2),
)

_names = itertools.count()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    created = HostileWorld(tmp_path_factory.mktemp("generated"))
    yield created
    created.close()


@pytest.fixture(scope="module")
def sandboxes(world: HostileWorld) -> Any:
    def build(judge: bool) -> LocalToolSandbox:
        return LocalToolSandbox(
            roots=[world.template],
            protected=[world.data],
            hidden=[world.data],
            allowed_commands=DEFAULT_ALLOWED_COMMANDS,
            command_timeout_s=5.0,
            limits=LIMITS,
            judge_commands=judge,
        )

    return {"judged": build(True), "os-only": build(False)}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", autouse=True)
async def _close(sandboxes: Any) -> Any:
    yield
    for sandbox in sandboxes.values():
        await sandbox.close()


QUICK = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@QUICK
@given(line=lines)
async def test_what_runs_on_its_own_stays_within_its_permit(
    world: HostileWorld, sandboxes: Any, line: str
) -> None:
    command = line.format(**world.placeholders)
    workspace = world.workspace(f"judged-{next(_names)}")
    sandbox = sandboxes["judged"].with_roots([workspace])
    verdict = sandbox.assess_command(command)
    if not verdict.allowed:
        return  # a human would be asked: nothing runs on its own
    before = world.snapshot(workspace)
    result = await sandbox.run_command(command, permit=CallPermit(write=verdict.writes))
    output = result.stdout + result.stderr
    escapes = world.escapes(
        before, workspace, output, frozen_except=written_entries(command, workspace)
    )
    assert not escapes, (command, escapes)


@QUICK
@given(line=lines)
async def test_the_confinement_alone_holds_for_any_line(
    world: HostileWorld, sandboxes: Any, line: str
) -> None:
    command = line.format(**world.placeholders)
    workspace = world.workspace(f"os-only-{next(_names)}")
    sandbox = sandboxes["os-only"].with_roots([workspace])
    before = world.snapshot(workspace)
    result = await sandbox.run_command(command, permit=CallPermit(write=True))
    output = result.stdout + result.stderr
    escapes = world.escapes(before, workspace, output, frozen_except=None)
    assert not escapes, (command, escapes)
