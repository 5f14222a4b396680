"""What one try of a model call did, and how the caller hears of it.

A resilient gateway (``ResilientGateway``) may send one logical model call several times:
retries, then fallback models. The caller that traces the call (``traced_model_call``) wants
every try in the trace, but the ``ILLMGateway`` port has no place for a tracer, and should not
grow one: a third-party gateway, or a host's own wrapper around ours, must keep working.
So the caller installs an observer for the duration of the call with ``observe_attempts``
(a context variable, so concurrent calls of concurrent tasks each reach their own), and the
gateway reports each try to whoever is listening with ``report_attempt``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

AttemptOutcome = Literal["ok", "retry", "fallback", "failed", "skipped"]
"""``ok``: this try answered. ``retry``: it failed and the same model is tried again after
``wait_s``. ``fallback``: it failed and the next model is tried. ``failed``: it failed and the
call fails with its error. ``skipped``: the model's circuit breaker was open, so nothing was
sent."""


@dataclass(frozen=True, slots=True)
class ModelAttempt:
    """One try of a model call.

    Attributes:
        number: 1 for the first try of the call, counting every model.
        model: The model tried.
        outcome: What happened next (see ``AttemptOutcome``).
        started_at: When the try began.
        ended_at: When it ended (before any wait).
        error: ``Type: message`` of its error, if it failed.
        status_code: The provider's HTTP status, when it failed with one.
        retry_after_s: The wait the provider asked for, if it did.
        wait_s: Seconds waited before the next try (``retry`` only).
    """

    number: int
    model: str
    outcome: AttemptOutcome
    started_at: datetime
    ended_at: datetime
    error: str | None = None
    status_code: int | None = None
    retry_after_s: float | None = None
    wait_s: float | None = None


class AttemptObserver(Protocol):
    """Hears of each try of a model call as it ends."""

    async def __call__(self, attempt: ModelAttempt) -> None:
        """Record ``attempt``; must not raise."""


_observer: contextvars.ContextVar[AttemptObserver | None] = contextvars.ContextVar(
    "core_agent_model_attempt_observer", default=None
)


@contextmanager
def observe_attempts(observer: AttemptObserver) -> Iterator[None]:
    """Send the tries of the model calls made in this block (this task) to ``observer``."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


async def report_attempt(attempt: ModelAttempt) -> None:
    """Tell the observer of the current call, if any, about ``attempt``."""
    observer = _observer.get()
    if observer is not None:
        await observer(attempt)
