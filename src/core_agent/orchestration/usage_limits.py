"""Checking a run against its usage limits, before it would cross them.

The limits are the task's (``TaskIdentity.limits``) and its session's
(``TaskIdentity.session_limits``, against the usage the session's other tasks had stored when
the run started plus this run's). Every check raises ``UsageLimitExceededError``, which ends
the task ``failed`` with a message naming the limit, what was used and the limit.

* Before a model call: a token or cost limit already reached stops the run, and so does an
  input (or total) token limit that the call would pass, predicted from the latest call's
  prompt size (a conversation's next prompt holds at least the previous one, unless the
  prompt window trims it). Output tokens and cost are only known once a call answers.
* After a model call: a limit the call passed stops the run there (the call's own usage is
  counted and shown), so no further call or tool runs past it.
* Before a turn's tool calls: they start only if they all fit in ``tool_calls``; calls that
  run at once (a turn's, parallel plan steps') reserve their places first, so they cannot
  pass it together.

Wall time is the task driver's (a deadline around the run).
"""

from __future__ import annotations

from core_agent.contracts.errors import UsageLimitExceededError
from core_agent.contracts.executor import ExecutionContext
from shared.agent_protocol import TokenUsage, UsageLimits

_TOKEN_LIMITS = ("input_tokens", "output_tokens", "total_tokens", "cost_usd")


def _used(usage: TokenUsage, limit: str) -> float:
    if limit == "input_tokens":
        return usage.input_tokens
    if limit == "output_tokens":
        return usage.output_tokens
    if limit == "total_tokens":
        return usage.input_tokens + usage.output_tokens
    return usage.cost_usd or 0.0


def _scopes(context: ExecutionContext) -> list[tuple[str, UsageLimits, TokenUsage]]:
    usage = context.run.stats.usage
    scopes = [("task", context.task.limits, usage)]
    if context.task.session_limits.bounded:
        scopes.append(("session", context.task.session_limits, context.task.session_usage + usage))
    return scopes


def _amount(limit: str, value: float) -> str:
    return f"${value:.4f}" if limit == "cost_usd" else f"{value:g}"


def _exceeded(
    scope: str, limit: str, used: float, maximum: float, message: str
) -> UsageLimitExceededError:
    return UsageLimitExceededError(
        f"{scope} usage limit {limit} ({_amount(limit, maximum)}): {message}",
        limit=limit,
        scope=scope,
        used=used,
        maximum=maximum,
    )


def check_before_model_call(context: ExecutionContext) -> None:
    """Stop the run if the next model call would pass a token or cost limit.

    Raises:
        UsageLimitExceededError: A limit is reached, or the predicted prompt would pass the
            input or total token limit.
    """
    predicted = context.run.stats.last_input_tokens
    for scope, limits, usage in _scopes(context):
        for limit in _TOKEN_LIMITS:
            maximum = getattr(limits, limit)
            if maximum is None:
                continue
            used = _used(usage, limit)
            if used >= maximum:
                raise _exceeded(
                    scope,
                    limit,
                    used,
                    maximum,
                    f"{_amount(limit, used)} used, no model call is left; stopped before the "
                    "next one",
                )
            if limit in ("input_tokens", "total_tokens") and used + predicted > maximum:
                raise _exceeded(
                    scope,
                    limit,
                    used,
                    maximum,
                    f"{_amount(limit, used)} used and the next model call's prompt would add "
                    f"about {predicted} (the size of the latest one); stopped before it",
                )


def check_after_model_call(context: ExecutionContext) -> None:
    """Stop the run if the model call just counted passed a token or cost limit.

    Raises:
        UsageLimitExceededError: One is passed.
    """
    for scope, limits, usage in _scopes(context):
        for limit in _TOKEN_LIMITS:
            maximum = getattr(limits, limit)
            if maximum is not None and _used(usage, limit) > maximum:
                used = _used(usage, limit)
                raise _exceeded(
                    scope,
                    limit,
                    used,
                    maximum,
                    f"the latest model call brought it to {_amount(limit, used)}; stopped "
                    "before anything else runs",
                )


def reserve_tool_calls(context: ExecutionContext, count: int) -> None:
    """Reserve ``count`` tool calls about to start, or stop the run if they do not fit.

    Each reserved call gives its place back with ``release_tool_call`` once it is counted in
    ``stats.tool_calls`` (or did not run).

    Raises:
        UsageLimitExceededError: The calls would pass ``tool_calls``.
    """
    maximum = context.task.limits.tool_calls
    if maximum is not None:
        taken = context.run.stats.tool_calls + context.run.reserved_tool_calls
        if taken + count > maximum:
            raise _exceeded(
                "task",
                "tool_calls",
                taken,
                maximum,
                f"{taken} made or under way and the model asked for {count} more; stopped "
                "before running them",
            )
    context.run.reserved_tool_calls += count


def release_tool_call(context: ExecutionContext) -> None:
    """Give back the place one reserved tool call held (see ``reserve_tool_calls``)."""
    context.run.reserved_tool_calls = max(context.run.reserved_tool_calls - 1, 0)
