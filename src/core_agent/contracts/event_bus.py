"""Port for publishing task events to in-process subscribers."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

E = TypeVar("E", bound=BaseModel)

EventHandler = Callable[[E], Awaitable[None] | None]
"""A subscriber: a sync or async callable taking one event."""


class Subscription(abc.ABC):
    """A handle that removes a subscriber."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop delivering events to this subscriber; calling it twice is harmless."""


class IEventBus(abc.ABC):
    """Delivers events to subscribers, by event type or to all (wildcard).

    Delivery is in publish order for each subscriber. A subscriber that raises is logged and
    skipped; it never breaks the publisher or the other subscribers.
    """

    @abc.abstractmethod
    def subscribe(self, event_type: type[E] | None, handler: EventHandler[E]) -> Subscription:
        """Register ``handler`` for events of ``event_type`` (and its subclasses).

        Args:
            event_type: The event class to receive, or ``None`` for every event.
            handler: Called once per matching event; may be sync or async.

        Returns:
            A subscription whose ``cancel`` unregisters the handler. Never blocks.
        """

    @abc.abstractmethod
    async def publish(self, event: BaseModel) -> None:
        """Deliver ``event`` to every matching subscriber, awaiting async handlers in order.

        Never raises because of a subscriber's error.
        """
