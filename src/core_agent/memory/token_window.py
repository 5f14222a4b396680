"""Short-term memory: the most recent turns that fit in a token budget.

System messages are pinned. Everything else is kept as *units*: a lone message, or an
assistant message that calls tools together with the tool results answering it, so a tool
call is never separated from its result (providers reject a result without its call). When
the budget is exceeded, whole units are evicted oldest first; the newest unit always stays,
even when it alone is over budget.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from core_agent.contracts.errors import UsageError
from core_agent.contracts.token_counter import ITokenCounter
from shared.agent_protocol import AssistantMessage, ChatMessage, SystemMessage, ToolMessage


class TokenWindowMemory:
    """Keeps the system prompt and the latest turns within ``max_tokens``."""

    def __init__(self, counter: ITokenCounter, max_tokens: int) -> None:
        if max_tokens < 1:
            raise UsageError("max_tokens must be at least 1")
        self._counter = counter
        self.max_tokens = max_tokens
        self._pinned: list[SystemMessage] = []
        self._units: deque[list[ChatMessage]] = deque()

    def add(self, message: ChatMessage) -> list[ChatMessage]:
        """Append a message; returns the messages evicted to make room, oldest first."""
        if isinstance(message, SystemMessage):
            self._pinned.append(message)
        elif isinstance(message, ToolMessage) and self._answers_last_unit(message):
            self._units[-1].append(message)
        else:
            self._units.append([message])
        return self._evict()

    def extend(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """``add`` each message; returns everything evicted."""
        evicted: list[ChatMessage] = []
        for message in messages:
            evicted.extend(self.add(message))
        return evicted

    def _answers_last_unit(self, message: ToolMessage) -> bool:
        if not self._units:
            return False
        head = self._units[-1][0]
        return isinstance(head, AssistantMessage) and any(
            call.id == message.tool_call_id for call in head.tool_calls
        )

    def _evict(self) -> list[ChatMessage]:
        evicted: list[ChatMessage] = []
        while len(self._units) > 1 and self.tokens() > self.max_tokens:
            evicted.extend(self._units.popleft())
        return evicted

    def messages(self) -> list[ChatMessage]:
        """Pinned system messages, then the kept turns in order."""
        return [*self._pinned, *(m for unit in self._units for m in unit)]

    def recent(self) -> list[ChatMessage]:
        """The kept turns without the pinned system messages."""
        return [m for unit in self._units for m in unit]

    def pinned(self) -> list[SystemMessage]:
        """The system messages."""
        return list(self._pinned)

    def tokens(self) -> int:
        """Tokens the kept messages take in a prompt."""
        return self._counter.count_messages(self.messages())

    def clear(self) -> None:
        """Forget everything, the system messages included."""
        self._pinned.clear()
        self._units.clear()
