from datetime import UTC, datetime

import anyio
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


class _Halt(BaseException):
    """A host's own BaseException, outside Exception like SystemExit."""


@pytest.mark.parametrize("raised", [SystemExit(2), _Halt("halted")], ids=lambda e: type(e).__name__)
async def test_a_subscriber_raising_a_base_exception_fails_alone(
    caplog, raised: BaseException
) -> None:
    # A host's handler calling sys.exit must not end the publisher's task (a task's run, left
    # queued or taken for canceled).
    bus = InProcessEventBus()
    seen: list[int] = []

    def leaves(event) -> None:
        raise raised

    bus.subscribe(None, leaves)
    bus.subscribe(None, lambda e: seen.append(e.seq))
    await bus.publish(started(1))
    assert seen == [1]
    assert type(raised).__name__ in caplog.text


async def test_a_cancel_still_goes_through_a_subscriber() -> None:
    bus = InProcessEventBus()

    async def waits(event) -> None:
        await anyio.sleep_forever()

    bus.subscribe(None, waits)
    with anyio.move_on_after(0.01) as scope:
        await bus.publish(started(1))
    assert scope.cancelled_caught


async def test_cancelled_subscriptions_stop_receiving() -> None:
    bus = InProcessEventBus()
    seen: list[int] = []
    subscription = bus.subscribe(None, lambda e: seen.append(e.seq))
    await bus.publish(started(1))
    subscription.cancel()
    subscription.cancel()
    await bus.publish(started(2))
    assert seen == [1]
