"""The OpenAI chat-completions wire format, shared by the gateways that speak it.

Messages and tool definitions as the protocol spells them, tool calls read back (arguments that
are not a JSON object kept raw), and the ``Retry-After`` a refusal carries. No vendor library
is imported here: both the litellm gateway and the plain HTTP one use these.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from core_agent.contracts.llm_gateway import ToolDefinition
from shared.agent_protocol import (
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """A protocol message in the chat-completions wire format."""
    if isinstance(message, SystemMessage | UserMessage):
        return {"role": message.kind, "content": message.content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments)
                    if call.arguments is not None
                    else (call.raw_arguments or ""),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def to_openai_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tool definitions as the ``tools`` member of a request."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def parse_tool_call(call_id: str, name: str, raw: str | None) -> ToolCall:
    """A tool call; arguments that are not a JSON object are kept raw for the error message."""
    try:
        parsed = json.loads(raw) if raw and raw.strip() else {}
    except ValueError:
        parsed = None
    arguments = parsed if isinstance(parsed, dict) else None
    return ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw)


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds a ``Retry-After`` (or ``retry-after-ms``) header asks to wait, if any.

    ``Retry-After`` is either seconds or an HTTP date; an unreadable value is ignored.
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(float(lowered["retry-after-ms"]) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)
