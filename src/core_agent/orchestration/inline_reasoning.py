"""Reasoning a model writes inline, taken out of its answer.

Reasoning models served raw (Qwen3, QwQ and the DeepSeek-R1 distills through llama.cpp,
vLLM without a reasoning parser, older Ollama builds) write their thinking into the answer's
text: ``<think>…</think>`` and then the answer. Left there, the thinking became the task's
output, the text streamed to the host, the input of a typed answer's parser, and a part of
every later prompt. ``InlineReasoningGateway`` wraps a provider's gateway and moves it to
``AssistantMessage.reasoning`` (where a server that separates it, as ``reasoning_content``,
has the gateway put it), which the trace keeps and the model is never sent back.

What counts as inline reasoning: a ``<think>`` (or ``<thinking>``) block at the start of the
text, or, with no opening tag, the text before a ``</think>`` on a line of its own (the chat
templates of DeepSeek-R1 and QwQ open the block in the prompt). While a stream is inside a
block that opened with its tag, its text is held back from the host; a block whose opening
tag was in the prompt cannot be told from an answer until it closes, so its text streams and
only the final answer leaves it out.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

from core_agent.contracts.errors import ModelIncompleteError
from core_agent.contracts.llm_gateway import (
    TOKEN_LIMIT_FINISH_REASONS,
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
)

_OPENING = re.compile(r"\s*<(think|thinking)>", re.IGNORECASE)
_CLOSING = re.compile(r"</(think|thinking)>", re.IGNORECASE)
_CLOSING_LINE = re.compile(r"(?:^|\n)[ \t]*</(think|thinking)>[ \t]*(?:\n|$)", re.IGNORECASE)
"""A closing tag with no opening one counts only on a line of its own, as templates that
open the block in the prompt have models write it: an answer that mentions the tag is left
alone."""
_OPENING_TAGS = ("<think>", "<thinking>")


def split_reasoning(text: str | None) -> tuple[str | None, str | None]:
    """``(reasoning, answer)`` of a model's text; ``(None, text)`` when it holds no reasoning.

    A block opened at the start and never closed (the token limit cut the thinking) is all
    reasoning, with no answer.
    """
    if not text:
        return None, text
    opening = _OPENING.match(text)
    if opening is not None:
        start = opening.end()
        closing = _CLOSING.search(text, start)
        if closing is None:
            return text[start:].strip() or None, None
        reasoning, answer = text[start : closing.start()], text[closing.end() :]
    else:
        closing = _CLOSING_LINE.search(text)
        if closing is None or _OPENING.search(text, 0, closing.start()):
            return None, text
        reasoning, answer = text[: closing.start()], text[closing.end() :]
    return reasoning.strip() or None, answer.lstrip() or None


class _HeldReasoning:
    """The text deltas of a stream, less a leading ``<think>`` block."""

    def __init__(self) -> None:
        self._head = ""
        self._state = "start"  # then "thinking", "after" the block, and "answer"
        self._scanned = 0
        """Where the search for the closing tag starts again (a long block is not scanned
        over from its start at every delta)."""

    def take(self, text: str) -> str:
        """The part of ``text`` that belongs to the answer (may be empty)."""
        if self._state == "answer":
            return text
        if self._state == "after":  # the blank lines between the block and the answer
            text = text.lstrip()
            if text:
                self._state = "answer"
            return text
        self._head += text
        if self._state == "start":
            head = self._head.lstrip().lower()
            if not any(tag.startswith(head) or head.startswith(tag) for tag in _OPENING_TAGS):
                self._state = "answer"
                return self._head
            if not _OPENING.match(self._head):
                return ""  # still maybe the start of a tag
            self._state = "thinking"
        closing = _CLOSING.search(self._head, self._scanned)
        if closing is None:
            self._scanned = max(len(self._head) - len("</thinking>"), 0)
            return ""
        self._state = "after"
        return self.take(self._head[closing.end() :])


class InlineReasoningGateway(ILLMGateway):
    """``inner``, with the reasoning its model writes inline moved out of the answer."""

    def __init__(self, inner: ILLMGateway) -> None:
        self.inner = inner

    @property
    def model_name(self) -> str:
        """The inner gateway's model."""
        return self.inner.model_name

    def context_window(self) -> int | None:
        """The inner gateway's (see ``ILLMGateway.context_window``)."""
        return self.inner.context_window()

    def warm_up(self) -> None:
        """Warms the inner gateway."""
        self.inner.warm_up()

    def connections(self) -> AbstractAsyncContextManager[None]:
        """The inner gateway's (see ``ILLMGateway.connections``)."""
        return self.inner.connections()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The inner gateway's answer, its inline reasoning moved to ``reasoning``.

        Raises:
            ModelIncompleteError: (retryable) Besides the inner gateway's errors: the answer
                was all reasoning (the token limit cut the thinking, or the model stopped
                there) and called no tool.
        """
        return _separated(await self.inner.complete(request))

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """The inner gateway's stream, without the deltas of a leading ``<think>`` block."""
        held = _HeldReasoning()
        async for item in self.inner.stream(request):
            if isinstance(item, LLMTextDelta):
                text = held.take(item.text)
                if text:
                    yield LLMTextDelta(text)
            else:
                yield _separated(item)


def _separated(response: LLMResponse) -> LLMResponse:
    message = response.message
    reasoning, answer = split_reasoning(message.content)
    if reasoning is None and answer == message.content:
        return response
    if not (answer or "").strip() and not message.tool_calls:
        cut = response.finish_reason in TOKEN_LIMIT_FINISH_REASONS
        raise ModelIncompleteError(
            "the model's answer held only its reasoning"
            + (" (its output token limit was reached while it was thinking)" if cut else ""),
            retryable=True,
        )
    if message.reasoning and reasoning:
        reasoning = f"{message.reasoning}\n\n{reasoning}"
    return replace(
        response,
        message=message.model_copy(
            update={"content": answer, "reasoning": reasoning or message.reasoning}
        ),
    )
