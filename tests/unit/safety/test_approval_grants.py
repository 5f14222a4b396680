from datetime import UTC, datetime, timedelta

from core_agent.safety.approvals import ApprovalGrants, call_hash
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


def test_pattern_grants_match_the_canonical_call() -> None:
    grants = ApprovalGrants()
    grants.add(
        decision(scope="pattern", pattern='run_command {"command":"git push*'),
        tool="run_command",
        **IDS,
    )
    assert grants.covering(tool="run_command", arguments={"command": "git push origin"}, **IDS)
    assert not grants.covering(tool="run_command", arguments={"command": "rm -rf x"}, **IDS)


def test_denials_grant_nothing_and_grants_expire() -> None:
    grants = ApprovalGrants()
    grants.add(
        ApprovalDecision(request_id="r", approved=False, scope="session"), tool="launch", **IDS
    )
    assert grants.covering(tool="launch", arguments={}, **IDS) is None
    past = datetime.now(UTC) - timedelta(seconds=1)
    grants.add(decision(scope="task", expires_at=past), tool="launch", **IDS)
    assert grants.covering(tool="launch", arguments={}, **IDS) is None
