"""Compaction: a session's oldest turns folded by the model into one summary (seeds 000, 001).

A session's history grows by a turn per task, while the model's window does not. When the
history no longer fits the room a new task leaves for it, ``ConversationCompactor.plan``
picks the oldest turns to fold: enough that the newest turns kept as they are take at most
half of what the summary leaves free. The other half is headroom: the next tasks' turns fit
without folding again, so a long session pays for one summary call every several tasks, not
one per task. ``summarize`` has the model merge the previous summary with the folded turns
(in as many calls as the turns need to fit the window); the caller stores the result, and
later tasks start from it instead of summarizing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core_agent.contracts.errors import ModelError, UsageError
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest
from core_agent.contracts.token_counter import ITokenCounter
from core_agent.contracts.untrusted import UNTRUSTED_NOTICE
from core_agent.memory.session_history import SessionTurn, summary_message
from core_agent.prompts import PromptSet, default_prompts
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    TokenUsage,
    ToolMessage,
    UserMessage,
)

_REQUEST = "Previous summary:\n{previous}\n\nNew turns:\n{turns}"


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


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Which turns to fold into the summary, which to send as they are.

    ``tokens`` is what the summary and every turn took before folding.
    """

    fold: list[SessionTurn]
    keep: list[SessionTurn]
    tokens: int


@dataclass(frozen=True, slots=True)
class Summary:
    """A summary the model wrote, what it cost and in how many calls."""

    text: str
    usage: TokenUsage
    calls: int


class ConversationCompactor:
    """Fits a session's history into a budget by summarizing its oldest turns.

    ``summary_tokens`` bounds a summary (asked of the model as its answer's length, and kept
    free in the budget); ``request_tokens`` bounds each summarizing request, so the model
    that cannot take the whole history at once can still summarize it. The model's
    instructions are the ``summary`` prompt of ``prompts`` (the shipped set when ``None``).
    """

    def __init__(
        self,
        counter: ITokenCounter,
        llm: ILLMGateway,
        *,
        summary_tokens: int,
        request_tokens: int,
        prompts: PromptSet | None = None,
    ) -> None:
        if summary_tokens < 16:
            raise UsageError("summary_tokens must be at least 16")
        if request_tokens < summary_tokens * 2:
            raise UsageError("request_tokens must be at least twice summary_tokens")
        self.counter = counter
        self._llm = llm
        self.summary_tokens = summary_tokens
        self._request_tokens = request_tokens
        self._prompt = (prompts if prompts is not None else default_prompts()).render(
            "summary", words=int(summary_tokens * 0.7)
        )

    def tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens ``messages`` take in a prompt."""
        return self.counter.count_messages(messages) if messages else 0

    def plan(
        self, budget: int, summary: str | None, turns: Sequence[SessionTurn]
    ) -> CompactionPlan:
        """The turns to fold so the history fits ``budget`` tokens (none when it fits)."""
        summary_size = self.tokens([summary_message(summary)]) if summary else 0
        sizes = [self.tokens(turn.messages) for turn in turns]
        total = summary_size + sum(sizes)
        if total <= budget:
            return CompactionPlan(fold=[], keep=list(turns), tokens=total)
        room = max(budget - self.summary_tokens, 0) // 2
        kept_from, used = len(turns), 0
        for index in range(len(turns) - 1, -1, -1):
            if used + sizes[index] > room:
                break
            used += sizes[index]
            kept_from = index
        return CompactionPlan(
            fold=list(turns[:kept_from]), keep=list(turns[kept_from:]), tokens=total
        )

    async def summarize(self, previous: str | None, turns: Sequence[SessionTurn]) -> Summary:
        """The previous summary and ``turns`` merged into one summary, by the model.

        Raises:
            ModelError: A call failed, or the model answered with no text.
        """
        usage, calls = TokenUsage(), 0
        for batch in self._batches(previous, [transcript(turn.messages) for turn in turns]):
            response = await self._llm.complete(self._request(previous, batch))
            usage, calls = usage + response.paid_usage, calls + 1
            text = (response.message.content or "").strip()
            if not text:
                raise ModelError("the model answered the summary request with no text")
            previous = text
        assert previous is not None
        return Summary(text=previous, usage=usage, calls=calls)

    def _request(self, previous: str | None, turns: str) -> LLMRequest:
        return LLMRequest(
            messages=(
                SystemMessage(content=f"{self._prompt}\n\n{UNTRUSTED_NOTICE}"),
                UserMessage(
                    content=_REQUEST.format(previous=previous or "(none yet)", turns=turns)
                ),
            ),
            max_tokens=self.summary_tokens,
            temperature=0.0,
            metadata={"purpose": "session.compaction"},
        )

    def _batches(self, previous: str | None, texts: list[str]) -> list[str]:
        """The turns' transcripts joined into requests that each fit ``request_tokens``.

        The previous summary of a later batch is the one the batch before writes: its room
        is ``summary_tokens``. A single turn too long for a request alone is cut.
        """
        empty = self._request(previous, "")
        fixed = self.tokens(empty.messages) + max(
            self.summary_tokens, self.counter.count_text(previous or "")
        )
        room = max(self._request_tokens - fixed, 1)
        batches: list[str] = []
        current: list[str] = []
        used = 0
        for text in texts:
            size = self.counter.count_text(text)
            if size > room:
                text = self._cut(text, room)
                size = self.counter.count_text(text)
            if current and used + size > room:
                batches.append("\n".join(current))
                current, used = [], 0
            current.append(text)
            used += size + 1
        if current:
            batches.append("\n".join(current))
        return batches

    def _cut(self, text: str, tokens: int) -> str:
        """The head of ``text`` within ``tokens``, marked as cut."""
        marker = "\n[... the rest of this turn is left out ...]"
        chars = len(text)
        while chars > 0:
            chars = chars * 3 // 4
            candidate = text[:chars] + marker
            if self.counter.count_text(candidate) <= tokens:
                return candidate
        return marker
