"""A circuit breaker for one model: stop calling a provider that keeps failing.

States, as in Nygard's *Release It!*:

* **closed**: calls go through; consecutive failures are counted, and a success resets
  the count. At ``failure_threshold`` failures in a row the breaker opens.
* **open**: calls fail at once with ``ModelCircuitOpenError`` (no request is sent) until
  ``reset_after_s`` have passed since it opened.
* **half-open**: one trial call goes through; every other call fails fast while it runs.
  If the trial succeeds the breaker closes; if it fails the breaker opens again for another
  ``reset_after_s``.

Only failures that say the provider is unwell count (``ModelError.retryable``: timeouts,
rate limits, 5xx, cut streams). A refused request (bad credentials, a prompt too long) says
nothing about the provider's health and leaves the count alone.

Written here rather than taken from a library: the maintained ones (``pybreaker``,
``circuitbreaker``, ``purgatory``) read the wall clock directly, so their timing cannot be
tested without really sleeping, and none lets exactly one trial call through while half-open
under concurrent callers. This one takes its clock as an argument and is a few dozen lines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from core_agent.contracts.errors import ModelCircuitOpenError

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """When a breaker opens, and for how long (``AGENT_MODEL_BREAKER_*``)."""

    failure_threshold: int = 5
    reset_after_s: float = 30.0


@dataclass(frozen=True, slots=True)
class BreakerTicket:
    """A call the breaker let through, to hand back with its verdict."""

    trial: bool
    """The half-open breaker's one trial call: only its verdict closes or reopens it."""


class CircuitBreaker:
    """Guards the calls to one model; see the module docstring for the states.

    A caller asks ``acquire()`` before each request and then reports, with the ticket it got,
    exactly one of ``record_success``, ``record_failure`` or ``release`` (no verdict: a
    refused request or a cancelled call). The ticket tells the trial call from calls let
    through before the breaker opened, which may end while the trial runs.
    """

    def __init__(
        self,
        model: str,
        settings: BreakerSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.settings = settings or BreakerSettings()
        self._clock = clock
        # Hosts may drive kernels from several threads (the synchronous facade).
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def state(self) -> BreakerState:
        """The state now (an open breaker whose time is up reads ``half_open``)."""
        with self._lock:
            return self._state()

    def _state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.settings.reset_after_s:
            return "half_open"
        return "open"

    def acquire(self) -> BreakerTicket:
        """Let one call through, or refuse it.

        Raises:
            ModelCircuitOpenError: The breaker is open, or half-open with its one trial call
                already under way.
        """
        with self._lock:
            state = self._state()
            if state == "closed":
                return BreakerTicket(trial=False)
            if state == "half_open" and not self._trial_running:
                self._trial_running = True
                return BreakerTicket(trial=True)
            assert self._opened_at is not None
            left = self.settings.reset_after_s - (self._clock() - self._opened_at)
            raise ModelCircuitOpenError(self.model, retry_in_s=max(left, 0.0))

    def record_success(self, ticket: BreakerTicket) -> None:
        """The call succeeded: the breaker closes and the failure count starts over.

        Also for a call let through before the breaker opened: the provider answers again.
        """
        with self._lock:
            self._failures = 0
            self._opened_at = None
            if ticket.trial:
                self._trial_running = False

    def record_failure(self, ticket: BreakerTicket) -> None:
        """The call failed in a way that says the provider is unwell."""
        with self._lock:
            if ticket.trial:
                self._trial_running = False
                if self._opened_at is not None:  # still half-open: open for another period
                    self._opened_at = self._clock()
                    return
            self._failures += 1
            if self._opened_at is None and self._failures >= self.settings.failure_threshold:
                self._opened_at = self._clock()

    def release(self, ticket: BreakerTicket) -> None:
        """The call ended without saying anything of the provider's health."""
        with self._lock:
            if ticket.trial:
                self._trial_running = False
