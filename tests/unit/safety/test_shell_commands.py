"""Commands are judged sub-command by sub-command, through a real shell grammar."""

from pathlib import Path

import pytest

from providers.sandbox.commands import CommandGuard
from providers.sandbox.paths import PathGuard
from providers.shell.tree_sitter_parser import TreeSitterShellParser

PARSER = TreeSitterShellParser()


def argvs(command: str) -> list[tuple[str, ...]]:
    return [c.argv for c in PARSER.parse(command).commands]


def test_every_program_in_a_compound_line_is_found() -> None:
    found = argvs(
        "ls -la && echo $(cat /etc/passwd) | grep root; bash -c 'rm -rf /' || env FOO=1 curl x `id`"
    )
    programs = {argv[0] for argv in found}
    assert programs == {"ls", "echo", "cat", "grep", "rm", "curl", "id"}


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("sh -c 'git push'", ("git", "push")),
        ("env -i PATH=/bin git push", ("git", "push")),
        ("timeout 5 nice -n 3 git push", ("git", "push")),
        ("xargs -n 1 rm < list", ("rm",)),
        ("find . -name '*.tmp' -exec rm -f {} \\;", ("rm", "-f")),
        ("sudo -u root git push", ("git", "push")),
        ("eval 'git push'", ("git", "push")),
        ("(cd /tmp && git push)", ("git", "push")),
        ("for f in a b; do git push; done", ("git", "push")),
        ("cat <(git push)", ("git", "push")),
    ],
)
def test_wrappers_are_unwrapped(command: str, inner: tuple[str, ...]) -> None:
    assert inner in argvs(command)


@pytest.mark.parametrize(
    "command", ["echo 'unterminated", "ls &&", 'bash -c "$SCRIPT"', 'eval "$X"', "if then fi"]
)
def test_what_cannot_be_judged_is_an_error(command: str) -> None:
    assert PARSER.parse(command).error


@pytest.fixture
def guard(tmp_path: Path) -> CommandGuard:
    root = tmp_path / "ws"
    root.mkdir()
    allowed = ["git status", "git log", "ls", "grep", "echo", "find", "cat"]
    return CommandGuard(PARSER, allowed, PathGuard([root], [tmp_path / "data"]))


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git status --short | grep M",
        "ls -la && git log -n 3",
        "echo hi > out.txt",
        "env LANG=C git status",
        "bash -c 'git status; ls'",
        "find . -name '*.py'",
    ],
)
def test_allowed_when_every_sub_command_is(guard: CommandGuard, command: str) -> None:
    assert guard.check(command).allowed, guard.check(command).reason


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("git status && rm -rf /", "'rm -rf /' is not an allowed command"),
        ("git status; curl http://x", "'curl http://x' is not an allowed command"),
        ("git status || git push", "'git push' is not an allowed command"),
        ("ls | sh", "'sh' is not an allowed command"),
        ("echo $(id)", "'id' is not an allowed command"),
        ("echo `whoami`", "'whoami' is not an allowed command"),
        ("bash -c 'git status; git push'", "'git push' is not an allowed command"),
        ("env git push", "'git push' is not an allowed command"),
        ("find . -exec rm {} +", "'rm' is not an allowed command"),
        ("find . -delete", "-delete is not allowed"),
        ("git -c core.pager=sh status", "not an allowed command"),
        ("ls | xargs rm", "'xargs rm' is not an allowed command"),
        ("$CMD status", "only known at run time"),
        ("echo 'oops", "cannot be judged"),
        ("echo hi > /etc/cron.d/x", "outside the workspace roots"),
        ("echo hi > .git/hooks/pre-commit", "protected .git"),
        ("git statusx", "not an allowed command"),
        ("", "empty"),
    ],
)
def test_refused_when_any_part_is_not(guard: CommandGuard, command: str, fragment: str) -> None:
    verdict = guard.check(command)
    assert not verdict.allowed
    assert fragment in verdict.reason


@pytest.mark.parametrize(
    "command",
    [
        "cat /etc/passwd",
        "cat ../../secret",
        "grep -r root /etc",
        "ls ~",
        "cat src/../../x",
        "git log --output=/tmp/x",
        "find / -name '*.key'",
    ],
)
def test_allowed_programs_cannot_reach_outside_the_workspace(guard, command) -> None:
    verdict = guard.check(command)
    assert not verdict.allowed and "outside the workspace roots" in verdict.reason


def test_paths_inside_the_workspace_and_urls_are_fine(guard) -> None:
    for command in ("cat src/app.py", "ls ./src", "grep -rn TODO src/", "echo https://x.org/a/b"):
        assert guard.check(command).allowed, guard.check(command).reason
