"""ResilientGateway: retries, Retry-After, the deadline, breakers and fallbacks.

Time is a fake clock whose sleep moves it, so backoff and breaker timing are checked without
waiting; only the hang test waits, for a deadline of a fraction of a second.
"""

import math

import anyio
import pytest

from core_agent.contracts.errors import (
    ModelAuthenticationError,
    ModelCircuitOpenError,
    ModelDeadlineError,
    ModelError,
    ModelIncompleteError,
    ModelRateLimitError,
)
from core_agent.contracts.llm_gateway import LLMRequest, LLMResponse, LLMTextDelta
from core_agent.orchestration.circuit_breaker import BreakerSettings
from core_agent.orchestration.model_attempts import ModelAttempt, observe_attempts
from core_agent.orchestration.model_retry import RetryPolicy
from core_agent.orchestration.resilient_gateway import ResilientGateway
from fakes.clock import FakeClock
from fakes.gateways import FakeFaultyGateway
from shared.agent_protocol import AssistantMessage, UserMessage

pytestmark = pytest.mark.anyio
REQUEST = LLMRequest(messages=[UserMessage(content="q")])


def down(status: int = 503) -> ModelError:
    return ModelError(f"HTTP {status}", status_code=status, retryable=True)


def answer(text: str = "fine") -> AssistantMessage:
    return AssistantMessage(content=text)


class Attempts:
    def __init__(self) -> None:
        self.seen: list[ModelAttempt] = []

    async def __call__(self, attempt: ModelAttempt) -> None:
        self.seen.append(attempt)

    @property
    def outcomes(self) -> list[tuple[str, str]]:
        return [(a.model, a.outcome) for a in self.seen]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def attempts() -> Attempts:
    return Attempts()


def resilient(clock: FakeClock, *models: FakeFaultyGateway, **policy: float) -> ResilientGateway:
    breaker = BreakerSettings(
        failure_threshold=int(policy.pop("failures", 5)), reset_after_s=policy.pop("reset", 30)
    )
    return ResilientGateway(
        list(models),
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        breaker=breaker,
        clock=clock,
        sleep=clock.sleep,
    )


async def call(gateway: ResilientGateway, attempts: Attempts) -> LLMResponse:
    with observe_attempts(attempts):
        return await gateway.complete(REQUEST)


async def test_retryable_errors_are_retried_with_jittered_exponential_backoff(
    clock, attempts
) -> None:
    model = FakeFaultyGateway([down(), down(), down()], name="a")
    gateway = resilient(clock, model, max_retries=3, base_delay_s=1.0, max_delay_s=3.0)
    response = await call(gateway, attempts)
    assert response.message.content == "ok" and model.calls == 4
    bounds = [1.0, 2.0, 3.0]  # 1 * 2**(n-1), capped at max_delay_s
    assert len(clock.sleeps) == 3
    assert all(0 <= wait <= bound for wait, bound in zip(clock.sleeps, bounds, strict=True))
    assert [a.outcome for a in attempts.seen] == ["retry", "retry", "retry", "ok"]
    assert [a.number for a in attempts.seen] == [1, 2, 3, 4]
    assert [a.wait_s for a in attempts.seen[:3]] == clock.sleeps
    assert attempts.seen[0].status_code == 503 and "HTTP 503" in attempts.seen[0].error


async def test_the_retry_budget_is_kept_and_the_last_error_raised(clock, attempts) -> None:
    model = FakeFaultyGateway([down(500), down(502), down(503), down(504)])
    gateway = resilient(clock, model, max_retries=2)
    with pytest.raises(ModelError) as caught:
        await call(gateway, attempts)
    assert model.calls == 3 and caught.value.status_code == 503
    assert [a.outcome for a in attempts.seen] == ["retry", "retry", "failed"]


async def test_a_non_retryable_error_is_not_retried(clock, attempts) -> None:
    model = FakeFaultyGateway([ModelAuthenticationError("bad key", status_code=401)])
    gateway = resilient(clock, model, FakeFaultyGateway([]), max_retries=3)
    with pytest.raises(ModelAuthenticationError):
        await call(gateway, attempts)
    assert model.calls == 1 and clock.sleeps == []
    assert [a.outcome for a in attempts.seen] == ["failed"]


async def test_retry_after_is_honoured_up_to_its_cap(clock, attempts) -> None:
    limited = [
        ModelRateLimitError("slow down", status_code=429, retryable=True, retry_after_s=s)
        for s in (7, 500)
    ]
    model = FakeFaultyGateway(limited)
    gateway = resilient(clock, model, max_retries=2, retry_after_cap_s=20, call_deadline_s=100)
    await call(gateway, attempts)
    assert clock.sleeps == [7, 20]
    assert attempts.seen[1].retry_after_s == 500 and attempts.seen[1].wait_s == 20


async def test_a_retry_after_that_is_no_number_is_not_waited_for(clock, attempts) -> None:
    # A third-party gateway may hand on float("nan"): a sleep of NaN raised ValueError.
    model = FakeFaultyGateway(
        [ModelRateLimitError("slow down", status_code=429, retryable=True, retry_after_s=math.nan)]
    )
    gateway = resilient(clock, model, max_retries=1, max_delay_s=2, call_deadline_s=100)
    await call(gateway, attempts)
    assert model.calls == 2 and len(clock.sleeps) == 1 and 0 <= clock.sleeps[0] <= 2
    assert attempts.seen[0].retry_after_s is None


async def test_a_retry_after_longer_than_the_deadline_left_fails_at_once(clock, attempts) -> None:
    model = FakeFaultyGateway(
        [ModelRateLimitError("slow down", status_code=429, retryable=True, retry_after_s=120)]
    )
    gateway = resilient(clock, model, max_retries=3, retry_after_cap_s=300, call_deadline_s=30)
    with pytest.raises(ModelDeadlineError) as caught:
        await call(gateway, attempts)
    assert clock.sleeps == [] and model.calls == 1
    assert "120 s (Retry-After" in str(caught.value) and "30 s deadline" in str(caught.value)
    assert caught.value.status_code == 429 and not caught.value.retryable
    assert [a.outcome for a in attempts.seen] == ["failed"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_wait_past_the_deadline_moves_on_to_the_fallback(clock, attempts, stream) -> None:
    limited = ModelRateLimitError("slow down", status_code=429, retryable=True, retry_after_s=20)
    primary = FakeFaultyGateway([limited], name="primary")
    backup = FakeFaultyGateway([], name="backup")
    gateway = resilient(clock, primary, backup, max_retries=3, call_deadline_s=10)
    with observe_attempts(attempts):
        if stream:
            response = [item async for item in gateway.stream(REQUEST)][-1]
        else:
            response = await gateway.complete(REQUEST)
    assert isinstance(response, LLMResponse) and response.model == "backup"
    assert clock.sleeps == [] and primary.calls == 1 and backup.calls == 1
    assert attempts.outcomes == [("primary", "fallback"), ("backup", "ok")]
    why = attempts.seen[0]
    assert why.error is not None and "20 s (Retry-After" in why.error
    assert "10 s deadline" in why.error and why.retry_after_s == 20


async def test_only_the_last_models_wait_past_the_deadline_fails_the_call(clock, attempts) -> None:
    def busy(seconds: float) -> ModelRateLimitError:
        return ModelRateLimitError("busy", status_code=429, retryable=True, retry_after_s=seconds)

    primary = FakeFaultyGateway([busy(4) for _ in range(5)], name="primary")
    backup = FakeFaultyGateway([busy(30)], name="backup")
    gateway = resilient(clock, primary, backup, max_retries=5, call_deadline_s=10)
    with pytest.raises(ModelDeadlineError) as caught:
        await call(gateway, attempts)
    # The primary waited twice (8 s); a third wait would end at 12 s: the backup is asked.
    assert clock.sleeps == [4, 4] and primary.calls == 3 and backup.calls == 1
    assert attempts.outcomes == [
        ("primary", "retry"),
        ("primary", "retry"),
        ("primary", "fallback"),
        ("backup", "failed"),
    ]
    message = str(caught.value)
    assert "30 s (Retry-After" in message and "primary: ModelDeadlineError" not in message
    assert "primary: model call gave up" in message  # why the primary was given up


async def test_waits_stop_before_the_deadline(clock, attempts) -> None:
    limited = [
        ModelRateLimitError("slow down", status_code=429, retryable=True, retry_after_s=3)
        for _ in range(10)
    ]
    model = FakeFaultyGateway(limited)
    gateway = resilient(clock, model, max_retries=10, failures=100, call_deadline_s=10)
    with pytest.raises(ModelDeadlineError):
        await call(gateway, attempts)
    assert clock.sleeps == [3, 3, 3]  # a fourth would end at 12 s
    assert model.calls == 4


async def test_jittered_backoff_never_sleeps_past_the_deadline(clock, attempts) -> None:
    model = FakeFaultyGateway([down() for _ in range(20)])
    gateway = resilient(
        clock,
        model,
        max_retries=10,
        base_delay_s=4,
        max_delay_s=4,
        call_deadline_s=10,
        failures=100,
    )
    start = clock.now
    with pytest.raises(ModelError):
        await call(gateway, attempts)
    assert clock.now - start < 10
    assert model.calls == len(clock.sleeps) + 1


async def test_a_try_still_running_at_the_deadline_is_cancelled(attempts) -> None:
    model = FakeFaultyGateway([anyio.Event()])
    gateway = ResilientGateway([model], policy=RetryPolicy(max_retries=3, call_deadline_s=0.2))
    with pytest.raises(ModelDeadlineError, match="still answering"):
        await call(gateway, attempts)
    assert model.calls == 1 and [a.outcome for a in attempts.seen] == ["failed"]


async def test_a_cut_stream_is_tried_again_from_the_start(clock, attempts) -> None:
    model = FakeFaultyGateway([ModelIncompleteError("cut", retryable=True), answer("whole")])
    gateway = resilient(clock, model)
    with observe_attempts(attempts):
        items = [item async for item in gateway.stream(REQUEST)]
    assert [i.text for i in items if isinstance(i, LLMTextDelta)] == ["partial", "whole"]
    assert isinstance(items[-1], LLMResponse) and items[-1].message.content == "whole"
    assert [a.outcome for a in attempts.seen] == ["retry", "ok"]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_answer_is_an_error_and_tried_again(clock, attempts, stream) -> None:
    model = FakeFaultyGateway([AssistantMessage(content="  "), answer()])
    gateway = resilient(clock, model)
    with observe_attempts(attempts):
        if stream:
            items = [item async for item in gateway.stream(REQUEST)]
            response = items[-1]
        else:
            response = await gateway.complete(REQUEST)
    assert response.message.content == "fine" and model.calls == 2
    assert "empty answer" in attempts.seen[0].error


async def test_a_model_that_keeps_failing_falls_back_to_the_next(clock, attempts) -> None:
    primary = FakeFaultyGateway([down() for _ in range(3)], name="primary")
    backup = FakeFaultyGateway([], name="backup")
    gateway = resilient(clock, primary, backup, max_retries=1)
    response = await call(gateway, attempts)
    assert response.model == "backup" and primary.calls == 2 and backup.calls == 1
    assert attempts.outcomes == [
        ("primary", "retry"),
        ("primary", "fallback"),
        ("backup", "ok"),
    ]


async def test_when_every_model_fails_the_error_says_why_each_was_given_up(clock, attempts) -> None:
    primary = FakeFaultyGateway([down() for _ in range(2)], name="primary")
    backup = FakeFaultyGateway(
        [ModelAuthenticationError("bad key", status_code=401)], name="backup"
    )
    gateway = resilient(clock, primary, backup, max_retries=1)
    with pytest.raises(ModelAuthenticationError) as caught:
        await call(gateway, attempts)
    message = str(caught.value)
    assert message.startswith("bad key") and "primary: " in message  # not only the last's
    assert caught.value.status_code == 401


async def test_after_n_failures_the_breaker_fails_fast_and_recovers_with_one_trial(
    clock, attempts
) -> None:
    model = FakeFaultyGateway([down() for _ in range(3)], name="primary")
    gateway = resilient(clock, model, max_retries=0, failures=3, reset=30)
    for _ in range(3):
        with pytest.raises(ModelError):
            await call(gateway, attempts)
    assert model.calls == 3
    with pytest.raises(ModelCircuitOpenError) as caught:
        await call(gateway, attempts)
    assert model.calls == 3  # failed at once: nothing was sent
    assert caught.value.model == "primary" and attempts.seen[-1].outcome == "skipped"
    clock.advance(30)
    response = await call(gateway, attempts)  # the one trial call
    assert response.message.content == "ok" and model.calls == 4
    assert gateway.breakers[0].state == "closed"


async def test_the_fallback_answers_while_the_primary_is_open(clock, attempts) -> None:
    primary = FakeFaultyGateway([down() for _ in range(10)], name="primary")
    backup = FakeFaultyGateway([], name="backup")
    gateway = resilient(clock, primary, backup, max_retries=5, failures=2)
    first = await call(gateway, attempts)
    # The breaker opened after two failed tries, so the primary's other retries were not paid.
    assert primary.calls == 2 and first.model == "backup"
    second = await call(gateway, attempts)
    assert primary.calls == 2 and second.model == "backup"
    assert attempts.outcomes[-2:] == [("primary", "skipped"), ("backup", "ok")]


async def test_cancelling_a_call_neither_retries_nor_counts_against_the_model(clock) -> None:
    model = FakeFaultyGateway([anyio.Event()])
    gateway = resilient(clock, model, failures=1)
    with anyio.move_on_after(0.05):
        await gateway.complete(REQUEST)
    assert model.calls == 1 and gateway.breakers[0].state == "closed"


async def test_a_consumer_may_stop_reading_a_stream(clock) -> None:
    model = FakeFaultyGateway([answer("text")])
    gateway = resilient(clock, model)
    stream = gateway.stream(REQUEST)
    assert isinstance(await anext(stream), LLMTextDelta)
    await stream.aclose()
    assert model.calls == 1 and gateway.breakers[0].state == "closed"
