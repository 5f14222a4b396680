"""How long to wait between tries of a model call, and when to stop trying.

The policy is data (``RetryPolicy``, from ``AGENT_MODEL_*`` settings); the waits are
tenacity's: exponential backoff with full jitter (``wait_random_exponential``: a random wait
between 0 and ``base * 2**(n-1)``, at most ``max_delay_s``, so callers that failed together do
not come back together), unless the provider said how long to wait (``Retry-After``), which
is honoured up to ``retry_after_cap_s``. ``ResilientGateway`` runs the tries.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import RetryCallState, wait_random_exponential

from core_agent.contracts.errors import ModelError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds of one model call's tries (see ``AgentSettings`` for the variables).

    Attributes:
        max_retries: Tries after the first, per model, for retryable errors.
        base_delay_s: The first backoff's upper bound; it doubles with each retry.
        max_delay_s: No backoff is longer than this.
        retry_after_cap_s: A provider's ``Retry-After`` is honoured up to this.
        call_deadline_s: The whole call (every try, every wait, every fallback model) ends
            by then.
    """

    max_retries: int = 2
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    retry_after_cap_s: float = 60.0
    call_deadline_s: float = 300.0


class BackoffWait:
    """tenacity ``wait``: the provider's ``Retry-After`` (capped), else jittered backoff."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._backoff = wait_random_exponential(
            multiplier=policy.base_delay_s, max=policy.max_delay_s
        )

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to wait after the failed try ``retry_state`` describes."""
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        if isinstance(error, ModelError) and error.retry_after_s is not None:
            return min(max(error.retry_after_s, 0.0), self._policy.retry_after_cap_s)
        return float(self._backoff(retry_state))


def is_retryable(error: BaseException) -> bool:
    """Whether the same call may succeed if tried again: a ``ModelError`` that says so."""
    return isinstance(error, ModelError) and error.retryable
