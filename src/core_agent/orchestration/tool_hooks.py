"""Running the host's tool hooks (``contracts.tool_hook``) around one call, and recording them.

Each hook's turn is a ``hook`` span under the call's ``tool`` span (``phase`` before or after,
``action`` allow, block, rewrite or failed, the ``reason``, and with content recording the
rewritten ``arguments``). Every block, rewrite and failure of a hook is also a
``tool.hook_applied`` event and an attribute of the ``tool`` span (``hook_blocked``,
``hook_rewrites``, ``hook_errors``).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Mapping
from typing import Any

from core_agent.contracts.errors import ToolArgumentsError, ToolHookBlockedError
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.tool import ITool
from core_agent.contracts.tool_hook import HookVerdict, ToolHookContext
from core_agent.observability.tracer import OpenSpan, Tracer
from shared.agent_protocol import ToolCall, ToolHookApplied, ToolResult

log = logging.getLogger(__name__)


def _hook_context(context: ExecutionContext, call: ToolCall, *, reused: bool) -> ToolHookContext:
    return ToolHookContext(
        task_id=context.task.task_id,
        session_id=context.task.session_id,
        call_id=call.id,
        tainted=context.run.tainted,
        reused=reused,
    )


async def run_before_hooks(
    context: ExecutionContext,
    tracer: Tracer,
    span: OpenSpan,
    call: ToolCall,
    tool: ITool,
    validated: Mapping[str, Any],
) -> tuple[ToolCall, Mapping[str, Any]]:
    """The call as the hooks leave it, with its validated arguments.

    Raises:
        ToolHookBlockedError: A hook blocked the call, raised, or rewrote it into arguments
            that fail the tool's schema (the call is not run).
    """
    for hook in context.tool_hooks:
        name = hook.hook_name()
        stop: ToolHookBlockedError | None = None
        async with tracer.span("hook", name, parent_span_id=span.span_id) as traced:
            traced.attributes.update(phase="before", call_id=call.id, action="allow")
            try:
                # A copy: a hook that edits the call in place instead of returning a rewrite
                # must not change what the policy grades and the human sees while the tool
                # runs the arguments validated before.
                verdict = await _maybe_await(
                    hook.before_call(
                        call.model_copy(deep=True), _hook_context(context, call, reused=False)
                    )
                )
                if verdict is not None and (
                    not isinstance(verdict, HookVerdict)
                    or verdict.action not in ("allow", "block", "rewrite")
                ):
                    raise TypeError(
                        f"before_call must return a HookVerdict or None, not {verdict!r}"
                    )
            except Exception as exc:
                log.warning("tool hook %s failed before %s", name, call.name, exc_info=True)
                reason = f"{type(exc).__name__}: {exc}"
                await _record(context, tracer, span, traced, call, name, "failed", reason)
                stop = ToolHookBlockedError(
                    f"tool hook {name!r} failed before the call ({reason}), so the call was "
                    "not run",
                    tool_name=call.name,
                    hook=name,
                )
                stop.__cause__ = exc
            else:
                if verdict is not None and verdict.action == "block":
                    await _record(
                        context, tracer, span, traced, call, name, "blocked", verdict.reason
                    )
                    stop = ToolHookBlockedError(
                        f"blocked by tool hook {name!r}: {verdict.reason or 'no reason given'}",
                        tool_name=call.name,
                        hook=name,
                    )
                elif verdict is not None and verdict.action == "rewrite":
                    rewritten = await _rewrite(
                        context, tracer, span, traced, call, tool, name, verdict
                    )
                    if isinstance(rewritten, ToolHookBlockedError):
                        stop = rewritten
                    else:
                        call, validated = rewritten
        # Raised once the hook's span is written: a block is the hook's answer, not its error.
        if stop is not None:
            raise stop
    return call, validated


async def _rewrite(
    context: ExecutionContext,
    tracer: Tracer,
    span: OpenSpan,
    traced: OpenSpan,
    call: ToolCall,
    tool: ITool,
    name: str,
    verdict: HookVerdict,
) -> tuple[ToolCall, Mapping[str, Any]] | ToolHookBlockedError:
    """The rewritten call and its validated arguments, or why it cannot run."""
    arguments = dict(verdict.arguments or {})
    try:
        validated = tool.validate_arguments(arguments)
    except ToolArgumentsError as exc:
        reason = f"its rewritten arguments fail the tool's schema: {exc}"
        await _record(context, tracer, span, traced, call, name, "failed", reason, arguments)
        blocked = ToolHookBlockedError(
            f"tool hook {name!r} rewrote the call into arguments that fail the tool's schema "
            f"({exc}), so the call was not run",
            tool_name=call.name,
            hook=name,
        )
        blocked.__cause__ = exc
        return blocked
    await _record(context, tracer, span, traced, call, name, "rewrote", verdict.reason, arguments)
    rewritten = call.model_copy(
        update={"arguments": arguments, "raw_arguments": json.dumps(arguments, default=str)}
    )
    return rewritten, validated


async def run_after_hooks(
    context: ExecutionContext,
    tracer: Tracer,
    span: OpenSpan,
    call: ToolCall,
    result: ToolResult,
    *,
    reused: bool,
) -> None:
    """Give ``result`` to every hook; one that raises is logged and recorded, never raised."""
    for hook in context.tool_hooks:
        name = hook.hook_name()
        async with tracer.span("hook", name, parent_span_id=span.span_id) as traced:
            traced.attributes.update(phase="after", call_id=call.id, action="observed")
            try:
                await _maybe_await(
                    hook.after_call(call, result, _hook_context(context, call, reused=reused))
                )
            except Exception as exc:
                log.warning("tool hook %s failed after %s", name, call.name, exc_info=True)
                reason = f"after the call: {type(exc).__name__}: {exc}"
                await _record(context, tracer, span, traced, call, name, "failed", reason)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _record(
    context: ExecutionContext,
    tracer: Tracer,
    span: OpenSpan,
    traced: OpenSpan,
    call: ToolCall,
    hook: str,
    action: str,
    reason: str,
    arguments: dict[str, Any] | None = None,
) -> None:
    traced.attributes["action"] = action
    # A hook's reason may quote the call's arguments: content.
    if reason and tracer.content:
        traced.attributes["reason"] = reason
    if action == "blocked":
        span.attributes["hook_blocked"] = hook
    elif action == "rewrote":
        span.attributes.setdefault("hook_rewrites", []).append(hook)
        if tracer.content:
            rewritten = tracer.text(json.dumps(arguments, default=str))
            span.attributes["rewritten_arguments"] = traced.attributes["arguments"] = rewritten
    else:
        traced.error = reason
        if tracer.content:
            # Cut by the trace store after its redaction (``Tracer.text``), not here.
            span.attributes.setdefault("hook_errors", []).append(tracer.text(f"{hook}: {reason}"))
        else:
            span.attributes["hook_errors"] = span.attributes.get("hook_errors", 0) + 1
    await context.emit(
        ToolHookApplied,
        call_id=call.id,
        tool=call.name,
        hook=hook,
        action=action,
        reason=reason,
        arguments=arguments,
    )
