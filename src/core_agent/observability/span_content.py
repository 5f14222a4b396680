"""The content of steps as span attributes: messages, answers, tool calls.

Built by hand from the protocol models (no ``model_dump``: this runs at every model call),
as plain JSON data that the store serialises once. Texts go through ``Tracer.text``; the
store redacts them and cuts them to its cap (``recording_store``).
"""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from typing import Any

from core_agent.contracts.trace_store import UNKNOWN_TOOL
from core_agent.observability.tracer import Tracer
from shared.agent_protocol import AssistantMessage, ChatMessage, ToolCall, ToolMessage

_ARGUMENTS = json.JSONEncoder(ensure_ascii=False, default=str)
"""``json.dumps`` with these options, without building an encoder at every call."""


def call_arguments(call: ToolCall) -> str:
    """A call's arguments as the model sent them (JSON text, or what it sent instead)."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return _ARGUMENTS.encode(call.arguments)


def tool_name(tracer: Tracer, name: str, known: Container[str]) -> str:
    """The name a called tool has in spans: ``name``, or else ``UNKNOWN_TOOL``.

    ``UNKNOWN_TOOL`` without content recording when ``name`` is not one of the ``known``
    tools: the model made it up, so it is the model's words.
    """
    if tracer.content or name in known:
        return name
    return UNKNOWN_TOOL


def message_record(tracer: Tracer, message: ChatMessage) -> dict[str, Any]:
    """``message`` as recorded: role, text, reasoning, tool calls or the call it answers."""
    entry: dict[str, Any] = {"role": message.kind}
    if isinstance(message, AssistantMessage) and message.reasoning:
        entry["reasoning"] = tracer.text(message.reasoning)
    if message.content is not None:
        entry["content"] = tracer.text(message.content)
    if isinstance(message, AssistantMessage) and message.tool_calls:
        entry["tool_calls"] = [
            {"id": call.id, "name": call.name, "arguments": tracer.text(call_arguments(call))}
            for call in message.tool_calls
        ]
    elif isinstance(message, ToolMessage):
        entry["tool_call_id"] = message.tool_call_id
        entry["name"] = message.name
        if message.is_error:
            entry["is_error"] = True
    return entry


def messages_record(tracer: Tracer, messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Each of ``messages`` as ``message_record`` gives it."""
    return [message_record(tracer, message) for message in messages]


ROUTE_TEXT_FEATURES = ("clauses",)
"""Routing features that are pieces of the task's text (the rest are counts and names)."""


def route_features(features: dict[str, Any], *, content: bool) -> dict[str, Any]:
    """The router's features as the route span records them.

    Without content recording, a feature that quotes the task's text is recorded as how
    many pieces it had (``clauses: 3``), so the span tells why the route was chosen without
    holding the task.
    """
    if content:
        return features
    return {
        name: len(value) if name in ROUTE_TEXT_FEATURES and isinstance(value, list) else value
        for name, value in features.items()
    }
