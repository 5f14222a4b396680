"""Reasoning a model writes inline, taken out of its answer.

Reasoning models served raw (Qwen3, QwQ and the DeepSeek-R1 distills through llama.cpp,
vLLM without a reasoning parser, older Ollama builds) write their thinking into the answer's
text: ``<think>…</think>`` and then the answer. Left there, the thinking became the task's
output, the text streamed to the host, the input of a typed answer's parser, and a part of
every later prompt. ``InlineReasoningGateway`` wraps a provider's gateway and moves it to
``AssistantMessage.reasoning`` (where a server that separates it, as ``reasoning_content``,
has the gateway put it), which the trace keeps and the model is never sent back.

What counts as inline reasoning:

* a ``<think>`` (or ``<thinking>``) block at the start of the text;
* with no opening tag, the text before a ``</think>`` on a line of its own, outside a code
  block, with no ``<think`` before it (the chat templates of DeepSeek-R1 and QwQ open the
  block in the prompt); the response says so (``LLMResponse.reasoning_opened_in_prompt``),
  because the text of an earlier answer it goes on with was thinking too.

Only the blank lines between a block and the answer are dropped: the answer's own leading
spaces (an indented line of code it continues) stay. While a stream is inside a block that
opened with its tag its text is held back from the host; a block whose opening tag was in
the prompt cannot be told from an answer until it closes, so its text streams and only the
final answer leaves it out.

An answer that was all thinking and called no tool is a retryable ``ModelIncompleteError``
(the token limit cut the thought, or the model stopped there).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from core_agent.contracts.errors import ModelIncompleteError
from core_agent.contracts.llm_gateway import (
    TOKEN_LIMIT_FINISH_REASONS,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
)
from core_agent.orchestration.gateway_wrapper import GatewayWrapper

_OPENING = re.compile(r"\s*<(think|thinking)>", re.IGNORECASE)
_ANY_OPENING = re.compile(r"<(think|thinking)[\s>]", re.IGNORECASE)
_CLOSING = re.compile(r"</(think|thinking)>", re.IGNORECASE)
_CLOSING_LINE = re.compile(r"(?:^|\n)[ \t]*</(think|thinking)>[ \t]*(?=\r?\n|$)", re.IGNORECASE)
_BLANK_LINES = re.compile(r"(?:[ \t]*\r?\n)+")
_LONGEST_CLOSING = len("</thinking>")
_OPENING_TAGS = ("<think>", "<thinking>")


@dataclass(frozen=True, slots=True)
class Split:
    """A model's text parted into its reasoning and its answer."""

    reasoning: str | None
    answer: str | None
    opened_in_prompt: bool = False
    """The block had no opening tag: the chat template opened it in the prompt."""


def split_reasoning(text: str | None) -> Split:
    """``text`` parted into reasoning and answer (no reasoning when it holds none).

    A block never closed is all reasoning, with no answer.
    """
    if not text:
        return Split(None, text)
    opening = _OPENING.match(text)
    if opening is not None:
        start = opening.end()
        closing = _CLOSING.search(text, start)
        if closing is None:
            return Split(text[start:].strip() or None, None)
        return Split(
            text[start : closing.start()].strip() or None, _answer_after(text[closing.end() :])
        )
    closing = _CLOSING_LINE.search(text)
    if (
        closing is None
        or _ANY_OPENING.search(text, 0, closing.start())
        or text.count("```", 0, closing.start()) % 2 == 1  # inside a code block
    ):
        return Split(None, text)
    return Split(
        text[: closing.start()].strip() or None,
        _answer_after(text[closing.end() :]),
        opened_in_prompt=True,
    )


def _answer_after(text: str) -> str | None:
    """The answer that follows a closing tag, without the blank lines between them.

    When the answer goes on on the tag's own line, the spaces after the tag go too.
    """
    stripped = text.lstrip(" \t")
    if stripped.startswith(("\n", "\r\n")):
        blank = _BLANK_LINES.match(text)
        text = text[blank.end() :] if blank else text
    else:
        text = stripped
    return text if text.strip() else None


class _HeldReasoning:
    """The text deltas of a stream, less a leading ``<think>`` block."""

    def __init__(self) -> None:
        self._head = ""
        # "start", then "thinking", "after" the block (its blank lines), and "answer".
        self._state = "start"
        self._scanned = 0
        """Where the search for the closing tag starts again (a long block is not scanned
        over from its start at every delta)."""

    def take(self, text: str) -> str:
        """The part of ``text`` that belongs to the answer (may be empty)."""
        if self._state == "answer":
            return text
        self._head += text
        if self._state == "after":
            if not self._head.strip():
                return ""
            self._state = "answer"
            return _answer_after(self._head) or ""
        if self._state == "start":
            head = self._head.lstrip().lower()
            if not any(tag.startswith(head) or head.startswith(tag) for tag in _OPENING_TAGS):
                self._state = "answer"
                return self._head
            opening = _OPENING.match(self._head)
            if opening is None:
                return ""  # still maybe the start of a tag
            self._state = "thinking"
            self._head = self._head[opening.end() :]
        closing = _CLOSING.search(self._head, self._scanned)
        if closing is None:
            self._scanned = max(len(self._head) - _LONGEST_CLOSING, 0)
            return ""
        self._state = "after"
        rest, self._head = self._head[closing.end() :], ""
        return self.take(rest)


class InlineReasoningGateway(GatewayWrapper):
    """``inner``, with the reasoning its model writes inline moved out of the answer."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The inner gateway's answer, its inline reasoning moved to ``reasoning``.

        Raises:
            ModelIncompleteError: (retryable) Besides the inner gateway's errors: the answer
                was all reasoning and called no tool.
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
    split = split_reasoning(message.content)
    if split.reasoning is None and split.answer == message.content:
        return response
    if not (split.answer or "").strip() and not message.tool_calls:
        cut = response.finish_reason in TOKEN_LIMIT_FINISH_REASONS
        raise ModelIncompleteError(
            "the model's answer held only its reasoning"
            + (
                " (its output token limit was reached while it was thinking: raise "
                "AGENT_MODEL_MAX_TOKENS)"
                if cut
                else ""
            ),
            retryable=True,
            usage=response.usage,
        )
    reasoning = split.reasoning
    if message.reasoning and reasoning:
        reasoning = f"{message.reasoning}\n\n{reasoning}"
    return replace(
        response,
        message=message.model_copy(
            update={"content": split.answer, "reasoning": reasoning or message.reasoning}
        ),
        reasoning_opened_in_prompt=split.opened_in_prompt,
    )
