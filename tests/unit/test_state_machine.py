import itertools

import pytest

from core_agent.contracts.errors import InvalidTransitionError, UsageError
from core_agent.kernel.state_machine import ALLOWED_TRANSITIONS, check_transition
from shared.agent_protocol import TaskStatus as S

LEGAL = {
    (S.QUEUED, S.RUNNING),
    (S.QUEUED, S.FAILED),
    (S.QUEUED, S.CANCELED),
    (S.RUNNING, S.WAITING_APPROVAL),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELED),
    (S.WAITING_APPROVAL, S.RUNNING),
    (S.WAITING_APPROVAL, S.FAILED),
    (S.WAITING_APPROVAL, S.CANCELED),
}


@pytest.mark.parametrize(("current", "target"), sorted(LEGAL))
def test_documented_transitions_are_allowed(current: S, target: S) -> None:
    check_transition("t1", current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [pair for pair in itertools.product(S, S) if pair not in LEGAL],
)
def test_every_other_transition_raises_a_typed_misuse_error(current: S, target: S) -> None:
    with pytest.raises(InvalidTransitionError) as caught:
        check_transition("t1", current, target)
    assert isinstance(caught.value, UsageError)
    assert caught.value.current == current.value
    assert caught.value.requested == target.value
    assert "t1" in str(caught.value)


def test_terminal_states_have_no_exit() -> None:
    for status in S:
        assert (not ALLOWED_TRANSITIONS[status]) == status.is_terminal
