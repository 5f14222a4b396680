"""Summary memory: turns evicted from the window are summarized by the model, not lost.

The summary is one system message placed after the pinned system prompt. Each eviction
folds the evicted turns into the previous summary (the model sees the old summary and the
new turns), so the conversation's memory stays one message of bounded size. The window's
budget leaves ``summary_tokens`` free for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from core_agent.contracts.errors import UsageError
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest
from core_agent.contracts.token_counter import ITokenCounter
from core_agent.memory.token_window import TokenWindowMemory
from core_agent.prompts import PromptSet, default_prompts
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

SUMMARY_HEADER = "Summary of the earlier conversation:"


def transcript(messages: Sequence[ChatMessage]) -> str:
    """The turns as plain text for the summarizer."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"assistant: {message.content}")
            lines.extend(
                f"assistant called {call.name}({call.arguments or call.raw_arguments or ''})"
                for call in message.tool_calls
            )
        elif isinstance(message, ToolMessage):
            lines.append(f"tool {message.name} returned: {message.content}")
        else:
            lines.append(f"{message.kind}: {message.content}")
    return "\n".join(lines)


class SummaryMemory:
    """A token window whose evicted turns live on as a model-written summary.

    The summarizer's instructions are the ``summary`` prompt of ``prompts`` (the shipped set
    when ``None``), told to stay within ``0.7 * summary_tokens`` words.
    """

    def __init__(
        self,
        counter: ITokenCounter,
        llm: ILLMGateway,
        *,
        max_tokens: int,
        summary_tokens: int = 300,
        prompts: PromptSet | None = None,
    ) -> None:
        if summary_tokens < 16 or summary_tokens >= max_tokens:
            raise UsageError("summary_tokens must be at least 16 and below max_tokens")
        self._window = TokenWindowMemory(counter, max_tokens - summary_tokens)
        self._llm = llm
        self._summary_tokens = summary_tokens
        self._prompt = (prompts if prompts is not None else default_prompts()).render(
            "summary", words=int(summary_tokens * 0.7)
        )
        self.summary: str | None = None

    async def add(self, message: ChatMessage) -> None:
        """Append a message; summarizes what the window evicts (one model call)."""
        evicted = self._window.add(message)
        if evicted:
            await self._fold(evicted)

    async def _fold(self, evicted: Sequence[ChatMessage]) -> None:
        previous = self.summary or "(none yet)"
        response = await self._llm.complete(
            LLMRequest(
                messages=[
                    SystemMessage(content=self._prompt),
                    UserMessage(
                        content=f"Previous summary:\n{previous}\n\nNew turns:\n"
                        f"{transcript(evicted)}"
                    ),
                ],
                max_tokens=self._summary_tokens,
                temperature=0.0,
                metadata={"purpose": "memory.summary"},
            )
        )
        text = (response.message.content or "").strip()
        if text:
            self.summary = text

    def messages(self) -> list[ChatMessage]:
        """System prompt, the summary (once there is one), then the recent turns."""
        summary: list[ChatMessage] = (
            [SystemMessage(content=f"{SUMMARY_HEADER}\n{self.summary}")] if self.summary else []
        )
        return [*self._window.pinned(), *summary, *self._window.recent()]
