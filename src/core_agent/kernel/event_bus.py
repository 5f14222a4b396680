"""In-process event bus: typed and wildcard subscribers, delivered in publish order."""

from __future__ import annotations

import inspect
import logging
from typing import Any, TypeVar

from pydantic import BaseModel

from core_agent.contracts.errors import is_interruption
from core_agent.contracts.event_bus import EventHandler, IEventBus, Subscription

log = logging.getLogger(__name__)
E = TypeVar("E", bound=BaseModel)


class _Subscription(Subscription):
    def __init__(self, bus: InProcessEventBus, entry: tuple[type[BaseModel] | None, Any]) -> None:
        self._bus = bus
        self._entry = entry

    def cancel(self) -> None:
        self._bus._remove(self._entry)


class InProcessEventBus(IEventBus):
    """Calls subscribers directly in the publisher's task; no queue, no thread."""

    def __init__(self) -> None:
        self._subscribers: list[tuple[type[BaseModel] | None, Any]] = []

    def subscribe(self, event_type: type[E] | None, handler: EventHandler[E]) -> Subscription:
        """Register a handler for ``event_type`` (``None``: every event)."""
        entry: tuple[type[BaseModel] | None, Any] = (event_type, handler)
        self._subscribers.append(entry)
        return _Subscription(self, entry)

    def _remove(self, entry: tuple[type[BaseModel] | None, Any]) -> None:
        # Identity, not equality: the same handler may be subscribed twice on purpose.
        self._subscribers = [e for e in self._subscribers if e is not entry]

    async def publish(self, event: BaseModel) -> None:
        """Deliver ``event`` to matching subscribers, isolating their failures."""
        # A snapshot, so a handler that (un)subscribes does not disturb this delivery.
        for event_type, handler in tuple(self._subscribers):
            if event_type is not None and not isinstance(event, event_type):
                continue
            try:
                result = handler(event)
                if inspect.isawaitable(result):
                    await result
            except BaseException as exc:
                # A host's handler calling sys.exit fails like any other; a cancel of the
                # publishing task or Ctrl-C still stops it.
                if is_interruption(exc):
                    raise
                log.exception("event subscriber %r failed on %s", handler, type(event).__name__)
