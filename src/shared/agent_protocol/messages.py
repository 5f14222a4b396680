"""Chat messages, tool calls and tool results exchanged with models and tools."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """A model's request to run one tool.

    ``arguments`` is ``None`` when the model sent text that is not a JSON object; the raw
    text is kept in ``raw_arguments`` so the error can be shown back to the model.
    """

    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None


class ToolResult(_Frozen):
    """What a tool call produced, as the model will read it."""

    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    error_type: str | None = None


class SystemMessage(_Frozen):
    """Instructions from the host application."""

    kind: Literal["system"] = "system"
    content: str


class UserMessage(_Frozen):
    """A message from the user or the host on the user's behalf."""

    kind: Literal["user"] = "user"
    content: str


class AssistantMessage(_Frozen):
    """A model turn: text, tool calls, or both."""

    kind: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    """What the model thought before it answered, where the server returned it apart
    (``reasoning_content``) or the model wrote it inline (``<think>…</think>``). Kept for
    the trace and the host; never sent back to the model."""


class ToolMessage(_Frozen):
    """A tool result fed back to the model, answering one tool call."""

    kind: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="kind"),
]
