"""Running one tool call: look-up, argument validation, time limit, error capture.

Whatever goes wrong becomes a ``ToolResult`` with ``is_error=True`` and a message written for
the model, so a bad call never crashes the task; the model reads the error and may correct
itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio

from core_agent.contracts.errors import (
    ToolArgumentsError,
    ToolError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from core_agent.contracts.tool import CallPermit, ITool, ToolContext
from core_agent.contracts.tool_registry import IToolRegistry
from shared.agent_protocol import ToolCall, ToolResult

log = logging.getLogger(__name__)

ToolGate = Callable[
    [ITool, Mapping[str, Any], Mapping[str, Any], ToolContext], Awaitable[CallPermit]
]
"""Checks run between validation and execution (judgement, approval): called with the tool,
the model's arguments, the validated ones and the call's context; returns the call's permit
or raises a ``ToolError`` to stop it."""

_RAW_ARGUMENTS_SHOWN = 200
"""How much of unparsable arguments to quote back to the model."""


class ToolRunner:
    """Executes tool calls against a registry with a default time limit."""

    def __init__(self, registry: IToolRegistry, *, default_timeout_s: float) -> None:
        self._registry = registry
        self._default_timeout_s = default_timeout_s

    async def run(
        self,
        call: ToolCall,
        context: ToolContext,
        *,
        allowed: Collection[str] | None = None,
        gate: ToolGate | None = None,
    ) -> ToolResult:
        """Run ``call``; only tools in ``allowed`` (when given) may be used.

        ``gate`` is awaited after validation, before the tool runs; the permit it returns
        goes to the tool in its context. Without a gate the tool runs with the default
        (read-only, no network) permit.
        """
        try:
            content = await self._run(call, context, allowed, gate)
        except ToolError as exc:
            return ToolResult(
                call_id=call.id,
                name=call.name,
                content=f"Error: {exc}",
                is_error=True,
                error_type=type(exc).__name__,
            )
        return ToolResult(call_id=call.id, name=call.name, content=content)

    async def _run(
        self,
        call: ToolCall,
        context: ToolContext,
        allowed: Collection[str] | None,
        gate: ToolGate | None,
    ) -> str:
        if allowed is not None and call.name not in allowed:
            raise ToolNotFoundError(
                f"unknown tool {call.name!r}; "
                f"available tools: {', '.join(sorted(allowed)) or 'none'}",
                tool_name=call.name,
            )
        tool = self._registry.get(call.name)
        if call.arguments is None:
            raw = (call.raw_arguments or "")[:_RAW_ARGUMENTS_SHOWN]
            raise ToolArgumentsError(
                f"arguments for tool {call.name!r} must be a JSON object; received {raw!r}",
                tool_name=call.name,
            )
        arguments = tool.validate_arguments(call.arguments)
        if gate is not None:
            permit = await gate(tool, call.arguments, arguments, context)
            context = dataclasses.replace(context, permit=permit)
        timeout = tool.spec.timeout_s or self._default_timeout_s
        try:
            with anyio.move_on_after(timeout):
                return await tool.invoke(arguments, context)
        except ToolError:
            raise
        except Exception as exc:
            log.debug("tool %s raised", call.name, exc_info=True)
            raise ToolExecutionError(
                f"tool {call.name!r} failed: {type(exc).__name__}: {exc}", tool_name=call.name
            ) from exc
        raise ToolTimeoutError(
            f"tool {call.name!r} did not finish within {timeout:g} s", tool_name=call.name
        )
