"""What the chat takes for a command, and what it says about one it does not know."""

from __future__ import annotations

import pytest

from core_agent.chat.slash_commands import COMMANDS, is_command, parse
from core_agent.contracts.errors import UsageError


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("/help", True),
        ("  /Resume  ab12 ", True),
        ("/", True),
        ("/etc/hosts: what is it?", False),
        ("what does /new do?", False),
        ("//tmp", False),
    ],
)
def test_a_command_is_a_slash_and_a_word(line: str, command: bool) -> None:
    assert is_command(line) is command


def test_a_command_takes_the_rest_of_the_line_as_its_argument() -> None:
    found, argument = parse("  /Resume  ab12 ")
    assert found is COMMANDS["resume"] and argument == "ab12"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("/hepl", "unknown command /hepl (did you mean /help?); /help lists them"),
        ("/sesions", "unknown command /sesions (did you mean /sessions?); /help lists them"),
        ("/xyzzy", "unknown command /xyzzy; /help lists them"),
    ],
)
def test_an_unknown_command_is_one_line_with_the_closest_one(line: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse(line)
    assert str(raised.value) == message


def test_every_command_the_issue_asks_for_is_there() -> None:
    wanted = {"help", "new", "sessions", "resume", "compact", "model", "tools", "cost", "exit"}
    assert wanted <= set(COMMANDS)
