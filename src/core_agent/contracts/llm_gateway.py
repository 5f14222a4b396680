"""Port to a language model: one chat completion, whole or streamed."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from core_agent.contracts.errors import ModelIncompleteError
from shared.agent_protocol import AssistantMessage, ChatMessage, TokenUsage


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as the model sees it: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One chat-completion call."""

    messages: Sequence[ChatMessage]
    tools: Sequence[ToolDefinition] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """A finished model turn, with what it cost."""

    message: AssistantMessage
    usage: TokenUsage
    model: str
    finish_reason: str | None = None
    """Why the model stopped, in OpenAI's words where the provider's map to them (``stop``,
    ``tool_calls``, ``length``: the output token limit, ``content_filter``); other values
    as the server sent them."""
    refusal: str | None = None
    """What the model said instead of answering, when it declined (OpenAI's ``refusal``
    member, sent in place of the content): ``checked_response`` fails such an answer."""
    usage_estimated: bool = False
    """The server reported no token counts: ``usage`` was counted offline by the kernel
    (``EstimatedUsageGateway``). Gateways leave it ``False``."""
    retried_usage: TokenUsage | None = None
    """What the tries before this answer cost, whose answers could not be used
    (``ResilientGateway``); apart from ``usage``, this answer's own, whose prompt is the one
    the next call builds on. Gateways leave it ``None``."""
    reasoning_opened_in_prompt: bool = False
    """The model closed a thinking block it never opened (its chat template opens one in
    every prompt): the text of an earlier answer this one goes on with was thinking too
    (``InlineReasoningGateway``). Gateways leave it ``False``."""

    @property
    def paid_usage(self) -> TokenUsage:
        """What the call cost: this answer's ``usage`` and the ``retried_usage`` before it."""
        if self.retried_usage is None:
            return self.usage
        return self.usage + self.retried_usage


@dataclass(frozen=True, slots=True)
class LLMTextDelta:
    """A piece of the answer's text as it streams in."""

    text: str


LLMStreamItem = LLMTextDelta | LLMResponse


class ILLMGateway(abc.ABC):
    """Calls a chat model.

    Implementations translate ``LLMRequest`` into a provider's protocol and the answer back;
    they never let a vendor exception out: every failure is a ``ModelError`` (or a subclass)
    carrying the provider's status code and body. Calls are awaitable and must not block the
    event loop.
    """

    @property
    @abc.abstractmethod
    def model_name(self) -> str:
        """The model this gateway calls, as it appears in traces (e.g. ``openai/gpt-4o``)."""

    def context_window(self) -> int | None:
        """Input tokens the model accepts, when the gateway knows; ``None`` otherwise.

        The ReAct loop fits long conversations into it (``AGENT_CONTEXT_MAX_TOKENS``
        overrides). Gateways that cannot tell keep this default.
        """
        return None

    def warm_up(self) -> None:
        """Load what the first call needs (libraries, clients) without calling the model.

        Blocks, possibly for seconds: hosts run it in a worker thread as soon as they know a
        call is coming (the kernel does when its first task starts), so the first call does
        not pay for all of it. It never raises and never reaches the network. Gateways with
        nothing to load keep this default.
        """
        return None

    def connections(self) -> AbstractAsyncContextManager[None]:
        """A scope in which calls from the calling event loop may keep their connections.

        Connections the gateway opens in it are reused by later calls from the same loop
        and closed when it ends; outside one, a call closes what it opened. The kernel holds
        one open while it is entered (``async with kernel``). Gateways that keep nothing
        keep this default.
        """
        return contextlib.nullcontext()

    @abc.abstractmethod
    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Run one completion and return the whole answer.

        Args:
            request: Messages, tool definitions and sampling options.

        Returns:
            The assistant message (text and/or tool calls) with token usage and cost.
            A tool call whose arguments are not a JSON object has ``arguments=None`` and the
            raw text in ``raw_arguments``; it is not an error at this level.

        Raises:
            ModelError: The call failed; ``status_code``/``body`` say how. Subclasses mark
                timeouts, rate limits and refused credentials.
        """

    @abc.abstractmethod
    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """Run one completion, yielding text as it arrives.

        Args:
            request: As for ``complete``.

        Returns:
            An async iterator of ``LLMTextDelta`` items followed by exactly one
            ``LLMResponse``, the last item, equal to what ``complete`` would return.

        Raises:
            ModelError: While iterating, as for ``complete``; deltas already yielded stand.
        """


TOKEN_LIMIT_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})
"""Finish reasons that say the output token limit cut the answer off (``length`` is
OpenAI's; servers that pass their own through use the others)."""

FILTERED_FINISH_REASONS = frozenset({"content_filter", "sensitive"})
"""Finish reasons that say the provider's filter stopped the answer (``sensitive`` is
Zhipu GLM's)."""

FAILED_FINISH_REASONS = frozenset(
    {"error", "network_error", "abort", "malformed_function_call", "malformed_response"}
)
"""Finish reasons that say the provider failed the answer, compared in lower case:
OpenRouter's mid-stream ``error`` (Cohere's ``ERROR``), Zhipu GLM's ``network_error``, vLLM's
and SGLang's ``abort`` (the request was aborted), Gemini's ``MALFORMED_FUNCTION_CALL`` and
``MALFORMED_RESPONSE``. The same request may well succeed again."""


def checked_response(response: LLMResponse) -> LLMResponse:
    """``response``, unless it is no real answer (whatever gateway produced it).

    A text answer the token limit cut off is returned: whoever asked decides (the reason-act
    loop has the model go on with it; a summary asked to fit ``max_tokens`` keeps it).

    Raises:
        ModelIncompleteError: (retryable) The answer has neither text nor tool calls, or the
            token limit cut it inside a tool call's arguments (``finish_reason: length`` with
            arguments that are not JSON). Arguments a model wrote badly but finished are not
            an error here: they go back to the model as the tool's error. The provider
            ended the answer with a failure (``FAILED_FINISH_REASONS``). Not retryable: the
            provider's content filter stopped the answer (``FILTERED_FINISH_REASONS``), which
            the same request would meet again; the model refused to answer (``refusal``),
            which it would do again, and which is quoted so that it is not lost.
    """
    message = response.message
    if response.refusal and response.refusal.strip():
        raise ModelIncompleteError(
            f"the model refused to answer: {response.refusal.strip()!r}",
            body=response.refusal,
            retryable=False,
            usage=response.usage,
        )
    if response.finish_reason in FILTERED_FINISH_REASONS:
        raise ModelIncompleteError(
            "the provider's content filter stopped the model's answer "
            f"(finish_reason: {response.finish_reason})",
            retryable=False,
            usage=response.usage,
        )
    if (response.finish_reason or "").lower() in FAILED_FINISH_REASONS:
        raise ModelIncompleteError(
            f"the provider ended the answer with an error (finish_reason: "
            f"{response.finish_reason})",
            retryable=True,
            usage=response.usage,
        )
    if not (message.content or "").strip() and not message.tool_calls:
        cut = response.finish_reason in TOKEN_LIMIT_FINISH_REASONS
        raise ModelIncompleteError(
            "the model returned an empty answer (no text and no tool calls"
            + (": its output token limit was reached first)" if cut else ")"),
            retryable=True,
            usage=response.usage,
        )
    if response.finish_reason in TOKEN_LIMIT_FINISH_REASONS and any(
        call.arguments is None for call in message.tool_calls
    ):
        raise ModelIncompleteError(
            "the model's tool-call arguments were cut off by the token limit "
            "(finish_reason: length)",
            retryable=True,
            usage=response.usage,
        )
    return response
