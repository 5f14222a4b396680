"""The circuit breaker's states, driven by a fake clock (nothing sleeps)."""

import pytest

from core_agent.contracts.errors import ModelCircuitOpenError, ModelError
from core_agent.orchestration.circuit_breaker import BreakerSettings, CircuitBreaker
from fakes.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker("m", BreakerSettings(failure_threshold=3, reset_after_s=10), clock=clock)


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        breaker.record_failure(breaker.acquire())


def test_it_opens_after_n_failures_in_a_row_and_then_fails_fast(breaker) -> None:
    fail(breaker, 2)
    assert breaker.state == "closed"
    fail(breaker, 1)
    assert breaker.state == "open"
    with pytest.raises(ModelCircuitOpenError) as caught:
        breaker.acquire()
    assert isinstance(caught.value, ModelError) and not caught.value.retryable
    assert caught.value.model == "m" and caught.value.retry_in_s == pytest.approx(10)


def test_a_success_starts_the_count_over(breaker) -> None:
    fail(breaker, 2)
    breaker.record_success(breaker.acquire())
    fail(breaker, 2)
    assert breaker.state == "closed"


def test_calls_without_a_verdict_do_not_count(breaker) -> None:
    for _ in range(5):
        breaker.release(breaker.acquire())
    assert breaker.state == "closed"


def test_after_the_reset_time_exactly_one_trial_call_goes_through(breaker, clock) -> None:
    fail(breaker, 3)
    clock.advance(9.9)
    with pytest.raises(ModelCircuitOpenError):
        breaker.acquire()
    clock.advance(0.1)
    assert breaker.state == "half_open"
    trial = breaker.acquire()
    with pytest.raises(ModelCircuitOpenError) as caught:
        breaker.acquire()  # a second caller while the trial runs
    assert caught.value.retry_in_s == 0
    breaker.record_success(trial)
    assert breaker.state == "closed"
    breaker.acquire()


def test_a_failed_trial_opens_it_again_for_the_whole_reset_time(breaker, clock) -> None:
    fail(breaker, 3)
    clock.advance(10)
    breaker.record_failure(breaker.acquire())
    assert breaker.state == "open"
    clock.advance(9)
    with pytest.raises(ModelCircuitOpenError):
        breaker.acquire()
    clock.advance(1)
    breaker.acquire()


def test_a_trial_without_a_verdict_lets_the_next_caller_try(breaker, clock) -> None:
    fail(breaker, 3)
    clock.advance(10)
    breaker.release(breaker.acquire())  # cancelled, say
    breaker.acquire()


@pytest.mark.parametrize("verdict", ["release", "record_failure"])
def test_a_call_from_before_the_breaker_opened_does_not_end_the_trial(
    breaker, clock, verdict
) -> None:
    # A call let through while closed ends (no verdict, or a failure) while the trial runs:
    # the trial is still the only call let through.
    early = breaker.acquire()
    fail(breaker, 3)
    clock.advance(10)
    breaker.acquire()  # the trial, still running
    getattr(breaker, verdict)(early)
    with pytest.raises(ModelCircuitOpenError):
        breaker.acquire()
