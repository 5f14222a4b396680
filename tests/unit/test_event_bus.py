from datetime import UTC, datetime

import pytest

from core_agent.kernel.event_bus import InProcessEventBus
from shared.agent_protocol import LLMDelta, TaskStarted

pytestmark = pytest.mark.anyio
NOW = datetime.now(UTC)


def started(seq: int) -> TaskStarted:
    return TaskStarted(event_id=f"e{seq}", task_id="t", seq=seq, occurred_at=NOW)


def delta(seq: int) -> LLMDelta:
    return LLMDelta(event_id=f"e{seq}", task_id="t", seq=seq, occurred_at=NOW, text="x")


async def test_typed_and_wildcard_subscribers_receive_in_publish_order() -> None:
    bus = InProcessEventBus()
    typed: list[int] = []
    everything: list[int] = []

    async def on_any(event) -> None:
        everything.append(event.seq)

    bus.subscribe(TaskStarted, lambda e: typed.append(e.seq))
    bus.subscribe(None, on_any)
    for event in (started(1), delta(2), started(3)):
        await bus.publish(event)
    assert typed == [1, 3]
    assert everything == [1, 2, 3]


async def test_a_failing_subscriber_does_not_stop_the_others(caplog) -> None:
    bus = InProcessEventBus()
    seen: list[int] = []

    def broken(event) -> None:
        raise RuntimeError("subscriber bug")

    bus.subscribe(None, broken)
    bus.subscribe(None, lambda e: seen.append(e.seq))
    await bus.publish(started(1))
    assert seen == [1]
    assert "subscriber bug" in caplog.text


async def test_cancelled_subscriptions_stop_receiving() -> None:
    bus = InProcessEventBus()
    seen: list[int] = []
    subscription = bus.subscribe(None, lambda e: seen.append(e.seq))
    await bus.publish(started(1))
    subscription.cancel()
    subscription.cancel()
    await bus.publish(started(2))
    assert seen == [1]
