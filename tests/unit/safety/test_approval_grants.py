from datetime import UTC, datetime, timedelta

import pytest

from core_agent.safety.approvals import ApprovalGrants, call_hash
from providers.shell.tree_sitter_parser import TreeSitterShellParser
from shared.agent_protocol import ApprovalDecision

IDS = {"task_id": "t1", "session_id": "s1"}


def decision(**kw) -> ApprovalDecision:
    return ApprovalDecision(request_id="r1", approved=True, **kw)


def test_the_hash_ignores_key_order_but_not_values() -> None:
    assert call_hash("run", {"a": 1, "b": 2}) == call_hash("run", {"b": 2, "a": 1})
    assert call_hash("run", {"a": 1}) != call_hash("run", {"a": 2})
    assert call_hash("run", {"a": 1}) != call_hash("walk", {"a": 1})


def test_scopes() -> None:
    grants = ApprovalGrants()
    grants.add(decision(scope="once"), tool="launch", **IDS)
    assert grants.covering(tool="launch", arguments={}, **IDS) is None
    grants.add(decision(scope="task"), tool="launch", **IDS)
    assert grants.covering(tool="launch", arguments={}, **IDS) is not None
    assert grants.covering(tool="launch", arguments={}, task_id="t2", session_id="s1") is None
    assert grants.covering(tool="other", arguments={}, **IDS) is None

    session = ApprovalGrants()
    session.add(decision(scope="session"), tool="launch", **IDS)
    assert session.covering(tool="launch", arguments={}, task_id="t9", session_id="s1")
    assert not session.covering(tool="launch", arguments={}, task_id="t9", session_id="s2")


def test_pattern_grants_match_the_canonical_call_of_other_tools() -> None:
    grants = ApprovalGrants()
    grants.add(
        decision(scope="pattern", pattern='fetch {"url":"https://a.org/*'), tool="fetch", **IDS
    )
    assert grants.covering(tool="fetch", arguments={"url": "https://a.org/x"}, **IDS)
    assert not grants.covering(tool="fetch", arguments={"url": "https://b.org/x"}, **IDS)


def command_grants(**extra: str) -> ApprovalGrants:
    grants = ApprovalGrants(shell_parser=TreeSitterShellParser())
    grants.add(
        decision(scope="pattern", pattern="git rev-parse*", **extra), tool="run_command", **IDS
    )
    return grants


@pytest.mark.parametrize(
    "command", ["git rev-parse HEAD", "git rev-parse --short HEAD | git rev-parse --verify x"]
)
def test_a_command_pattern_covers_lines_whose_every_sub_command_matches(command: str) -> None:
    assert command_grants().covering(tool="run_command", arguments={"command": command}, **IDS)


@pytest.mark.parametrize(
    "command",
    [
        "git rev-parse HEAD; git branch -D x",
        "git rev-parse HEAD && rm -rf src",
        "git rev-parse $(touch pwned)",
        "git rev-parse HEAD > notes.txt",
        "git rev-parse 'unterminated",
        "rm -rf x",
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=x git rev-parse",
        "LD_PRELOAD=./x.so git rev-parse HEAD",
    ],
)
def test_a_command_pattern_never_covers_anything_more(command: str) -> None:
    assert not command_grants().covering(tool="run_command", arguments={"command": command}, **IDS)


def test_a_command_pattern_holds_in_its_session_unless_the_human_widened_it() -> None:
    other = {"task_id": "t2", "session_id": "s2"}
    call = {"tool": "run_command", "arguments": {"command": "git rev-parse HEAD"}}
    assert not command_grants().covering(**call, **other)
    assert command_grants(pattern_scope="all_sessions").covering(**call, **other)


def test_without_a_parser_a_command_pattern_covers_nothing() -> None:
    grants = ApprovalGrants()
    grants.add(decision(scope="pattern", pattern="git rev-parse*"), tool="run_command", **IDS)
    assert not grants.covering(tool="run_command", arguments={"command": "git rev-parse"}, **IDS)


def test_denials_grant_nothing_and_grants_expire() -> None:
    grants = ApprovalGrants()
    grants.add(
        ApprovalDecision(request_id="r", approved=False, scope="session"), tool="launch", **IDS
    )
    assert grants.covering(tool="launch", arguments={}, **IDS) is None
    past = datetime.now(UTC) - timedelta(seconds=1)
    grants.add(decision(scope="task", expires_at=past), tool="launch", **IDS)
    assert grants.covering(tool="launch", arguments={}, **IDS) is None
