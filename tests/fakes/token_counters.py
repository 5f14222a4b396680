"""A token counter double: one token per word plus framing, with a record of its calls."""

from __future__ import annotations

from collections.abc import Sequence

from core_agent.contracts.token_counter import ITokenCounter
from shared.agent_protocol import AssistantMessage, ChatMessage

PER_MESSAGE = 4


class FakeWordTokenCounter(ITokenCounter):
    def __init__(self) -> None:
        self.counted: list[ChatMessage] = []

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        self.counted.extend(messages)
        total = 0
        for message in messages:
            total += PER_MESSAGE + self.count_text(message.content or "")
            if isinstance(message, AssistantMessage):
                total += sum(2 + len(str(c.arguments).split()) for c in message.tool_calls)
        return total
