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

A nested agent's task (``kernel.nested_agents``) is held to its ancestors' limits as well as
its own, live: while a parent waits for its children in this process, each child's run is
in the parent's ``child_runs`` and names the parent as its ``parent_run``, and every check
above counts a run's usage and tool calls together with those of all its running
descendants. So children running at once (a turn's agent calls, a team's members, a
workflow layer's agent nodes) see each other's spending as it happens, and each stops, the
way a task stops at its own limit, once the ancestor's limit is reached; the error names the
ancestor (``scope`` ``parent task <id>``, ``ancestor task <id>``, or ``session of`` either).
A child the parent waits for that does not run here (it waits for a human, or another
process carries it on) counts at the usage it has stored, as last read. Nothing is counted
twice: a child's usage enters its parent's ``stats`` only when it ends, at the moment it
leaves ``child_runs``. A limit is passed by at most the usage of the model
calls under way when it is reached (one per run calling the model then), as with one task's
parallel plan steps; tool calls take their places before they run, so they never pass it.

Wall time is the task driver's (a deadline around the run).
"""

from __future__ import annotations

from core_agent.contracts.errors import UsageLimitExceededError
from core_agent.contracts.executor import ExecutionContext, RunState
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


def live_usage(run: RunState) -> TokenUsage:
    """What ``run`` has used, with what its running child tasks have (and theirs)."""
    usage = run.stats.usage
    for child in run.child_runs.values():
        usage = usage + live_usage(child)
    return usage


def live_tool_calls(run: RunState) -> int:
    """The tool calls ``run`` and its running child tasks (and theirs) made or reserved."""
    taken = run.stats.tool_calls + run.reserved_tool_calls
    for child in run.child_runs.values():
        taken += live_tool_calls(child)
    return taken


def _ancestors(context: ExecutionContext) -> list[tuple[str, ExecutionContext]]:
    """The runs above ``context``'s in this process, farthest first, with what to call them.

    Farthest first, then the run's own: a limit below is often only what the one above had
    left when the run below started, so of two limits reached at once the upper one is the
    one to name.
    """
    found: list[tuple[str, ExecutionContext]] = []
    above = context.run.parent_run
    while above is not None:
        relation = "parent" if not found else "ancestor"
        found.append((f"{relation} task {above.task.task_id}", above))
        above = above.run.parent_run
    found.reverse()
    return found


def _scopes(context: ExecutionContext) -> list[tuple[str, UsageLimits, TokenUsage]]:
    scopes: list[tuple[str, UsageLimits, TokenUsage]] = []
    for name, above in _ancestors(context):
        scopes.extend(_own_scopes(name, above))
    scopes.extend(_own_scopes("task", context))
    return scopes


def _own_scopes(name: str, context: ExecutionContext) -> list[tuple[str, UsageLimits, TokenUsage]]:
    run = context.run
    usage = live_usage(run) if run.child_runs else run.stats.usage
    scopes = [(name, context.task.limits, usage)]
    if context.task.session_limits.bounded:
        session = "session" if name == "task" else f"session of {name}"
        scopes.append((session, context.task.session_limits, context.task.session_usage + usage))
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
        UsageLimitExceededError: The calls would pass ``tool_calls`` (the task's, or an
            ancestor's, counting what its running descendants made or reserved).
    """
    for scope, above in [*_ancestors(context), ("task", context)]:
        maximum = above.task.limits.tool_calls
        if maximum is None:
            continue
        taken = live_tool_calls(above.run)
        if taken + count > maximum:
            raise _exceeded(
                scope,
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
