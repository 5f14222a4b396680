"""``ILLMGateway`` through litellm: any provider litellm speaks, local servers included.

litellm takes about five seconds to import and, unless told otherwise, fetches a price table
from the network on import; so it is imported on the first call, never at start-up, with
``LITELLM_LOCAL_MODEL_COST_MAP=True`` set first so the bundled table is used.

litellm's own retries (and the openai SDK's under it) are off: one call here is one request.
The kernel retries, with backoff, a deadline and a circuit breaker, and traces every try
(``core_agent.orchestration.resilient_gateway``). What this adapter owes the kernel is an
honest verdict on each request: a stream that ended without the provider's finish reason
(and without ``[DONE]``, where the openai client under litellm read the stream), an
empty answer, or tool-call arguments cut off by the token limit is a retryable
``ModelIncompleteError``, never a response; a ``Retry-After`` header is passed on in
``ModelError.retry_after_s``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import threading
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from types import ModuleType
from typing import Any

import anyio

from core_agent.contracts.errors import (
    ModelAuthenticationError,
    ModelContextWindowError,
    ModelError,
    ModelIncompleteError,
    ModelNotConfiguredError,
    ModelRateLimitError,
    ModelTimeoutError,
)
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
    checked_response,
)
from core_agent.contracts.settings import (
    MODEL_CONFIGURATION_HELP,
    PLACEHOLDER_API_KEY,
    AgentSettings,
)
from providers.openai_wire import (
    PAGE_CONTENT_TYPES,
    StreamedAnswer,
    next_unless_stalled,
    page_instead_of_answer,
    parse_tool_call,
    refused_members,
    retry_after_seconds,
    says_prompt_too_long,
    stream_error,
    to_openai_message,
    to_openai_tools,
)
from shared.agent_protocol import AssistantMessage, TokenUsage

_import_lock = threading.Lock()
_litellm: ModuleType | None = None
logger = logging.getLogger(__name__)


# Modules litellm imports on its first request rather than at import (the openai client's
# resources, the response-cost helpers): about 0.7 s here, loaded by ``warm_up`` instead.
# Best effort: a litellm that moved them simply loads them on the first call.
_FIRST_CALL_MODULES = (
    "openai.resources.chat",
    "litellm.litellm_core_utils.llm_response_utils.response_metadata",
)


def load_litellm() -> ModuleType:
    """litellm, imported on first use with the bundled price table and telemetry off."""
    global _litellm
    with _import_lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            litellm.telemetry = False
            litellm.suppress_debug_info = True
            _litellm = litellm
        return _litellm


async def litellm_off_the_loop() -> ModuleType:
    """``load_litellm``, in a worker thread the first time.

    The import takes seconds and must not stall the event loop (other tasks, a host's
    notifications) meanwhile.
    """
    if _litellm is not None:
        return _litellm
    return await anyio.to_thread.run_sync(load_litellm)


class LiteLLMGateway(ILLMGateway):
    """Calls ``litellm.acompletion`` once per call; maps its exceptions to ``ModelError``s.

    ``timeout_s`` bounds one request; retries and the overall deadline are the kernel's.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        temperature: float | None = None,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._temperature = temperature
        self._context_window: int | None = None
        self._context_window_known = False
        self._placeholder_key: bool | None = None
        self._stream_options = True
        """Whether to ask for the usage chunk; off once the provider refused it."""

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> LiteLLMGateway:
        """Configured from ``AGENT_MODEL*``.

        Raises:
            ModelNotConfiguredError: No model.
            ConfigurationError: ``AGENT_MODEL_API_BASE`` is set but no http(s) URL with a host
                (litellm would report it on every call as a retryable connection error).
        """
        model = settings.resolved_model
        if not model:
            raise ModelNotConfiguredError(MODEL_CONFIGURATION_HELP)
        return cls(
            model,
            api_base=settings.checked_model_api_base,
            api_key=settings.model_api_key.get_secret_value() if settings.model_api_key else None,
            timeout_s=settings.model_timeout_s,
            temperature=settings.model_temperature,
        )

    @property
    def model_name(self) -> str:
        """The litellm model string."""
        return self._model

    def context_window(self) -> int | None:
        """The model's ``max_input_tokens`` in litellm's bundled model table.

        ``None`` for a model it does not list, such as a local or self-hosted one: set
        ``AGENT_CONTEXT_MAX_TOKENS`` for those.
        """
        if not self._context_window_known:
            try:
                info = load_litellm().get_model_info(self._model)
                tokens = info.get("max_input_tokens") or info.get("max_tokens")
                self._context_window = int(tokens) if tokens else None
            except Exception:  # litellm raises a bare Exception for an unlisted model
                self._context_window = None
            self._context_window_known = True
        return self._context_window

    def _arguments(self, request: LLMRequest) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": self._model,
            "messages": [to_openai_message(m) for m in request.messages],
            "timeout": self._timeout_s,
            # One request per call: the kernel retries (see the module docstring).
            "num_retries": 0,
            "max_retries": 0,
        }
        if request.tools:
            arguments["tools"] = to_openai_tools(request.tools)
        temperature = request.temperature if request.temperature is not None else self._temperature
        if temperature is not None:
            arguments["temperature"] = temperature
        if request.max_tokens is not None:
            arguments["max_tokens"] = request.max_tokens
        if request.response_format is not None:
            arguments["response_format"] = request.response_format
        if self._api_base:
            arguments["api_base"] = self._api_base
        if self._api_key:
            arguments["api_key"] = self._api_key
        elif self._needs_placeholder_key():
            arguments["api_key"] = PLACEHOLDER_API_KEY
        return arguments

    def _needs_placeholder_key(self) -> bool:
        """A server of our own (``api_base``) with no key configured nor in the environment."""
        if self._placeholder_key is None:
            if not self._api_base:
                self._placeholder_key = False
            else:
                try:
                    found = load_litellm().validate_environment(self._model)
                    self._placeholder_key = not found.get("keys_in_environment", True)
                except Exception:  # an unknown provider: send what was configured, nothing more
                    self._placeholder_key = False
        return self._placeholder_key

    def warm_up(self) -> None:
        """Import litellm and what its first request loads; look up the model's window.

        The window is asked for on the event loop when a task builds its prompt: answered
        from here, it does not import litellm there.
        """
        try:
            load_litellm()
            self.context_window()
            for name in _FIRST_CALL_MODULES:
                importlib.import_module(name)
            self._needs_placeholder_key()
        except Exception:
            # Warming is an optimisation: the first call imports again and reports the error.
            logger.debug("warming the litellm gateway failed", exc_info=True)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One non-streamed completion."""
        litellm = await litellm_off_the_loop()
        try:
            response = await litellm.acompletion(**self._arguments(request))
        except Exception as exc:
            raise map_litellm_error(litellm, exc, url=self._api_base) from exc
        return checked_response(self._to_response(litellm, response))

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """Streamed completion; the final item is assembled from all chunks.

        Assembled here (``StreamedAnswer``) rather than by litellm's ``stream_chunk_builder``,
        which merges parallel tool calls that a server numbers alike and, when the server
        sends no usage, makes up a prompt count from the messages alone (the tool schemas
        left out) that passes for the server's. Without the server's usage the counts are 0
        here, and the kernel counts them itself (``EstimatedUsageGateway``).

        Raises:
            ModelIncompleteError: The stream ended without the provider's finish reason and
                without ``[DONE]`` (a connection cut mid-answer), or its answer is empty or
                cut (see ``checked_response``).
        """
        litellm = await litellm_off_the_loop()
        arguments = self._arguments(request)
        chunks: list[Any] = []
        answer = StreamedAnswer()
        try:
            while True:  # sent again without stream_options once, if the server refuses it
                usage_asked = self._stream_options
                options = {"stream_options": {"include_usage": True}} if usage_asked else {}
                try:
                    stream = await litellm.acompletion(**arguments, stream=True, **options)
                    break
                except Exception as exc:
                    if not (usage_asked and _refuses_stream_options(exc)):
                        raise
                    self._stream_options = False
            provider = _ProviderChunks.under(stream)
            answered = await provider.error_answered() if provider else None
            if answered is not None:
                raise answered
            while (chunk := await _next_chunk(stream, answer)) is not None:
                chunks.append(chunk)
                text = answer.take(_chunk_dict(chunk))
                if text:
                    yield LLMTextDelta(text)
            if not chunks:
                raise ModelIncompleteError(
                    "the model's stream ended without any chunk", retryable=True
                )
            finish_reason = provider_finish_reason(stream, chunks)
            if finish_reason is None and not (provider and provider.done):
                raise ModelIncompleteError(
                    "the model's stream ended before the provider said it was finished (no "
                    "finish reason, no [DONE]): the answer was cut off",
                    retryable=True,
                )
        except ModelError:
            raise
        except Exception as exc:
            raise map_litellm_error(litellm, exc, url=self._api_base) from exc
        usage = answer.usage if provider_sent_usage(stream) else None
        usage = usage or {}
        input_tokens = _count(usage.get("prompt_tokens"))
        output_tokens = _count(usage.get("completion_tokens"))
        cached = _usage_detail(usage, "prompt_tokens_details", "cached_tokens")
        yield checked_response(
            LLMResponse(
                message=AssistantMessage(
                    content=answer.content(),
                    tool_calls=answer.tool_calls(),
                    reasoning=answer.reasoning(),
                ),
                usage=TokenUsage(
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    cost_usd=self._token_cost(litellm, input_tokens, output_tokens, cached),
                    cache_read_tokens=cached,
                    reasoning_tokens=_usage_detail(
                        usage, "completion_tokens_details", "reasoning_tokens"
                    ),
                ),
                model=answer.model or self._model,
                finish_reason=finish_reason,
                refusal=answer.refusal() or (provider.answer.refusal() if provider else None),
            )
        )

    def _to_response(self, litellm: ModuleType, response: Any) -> LLMResponse:
        try:
            choice = response.choices[0]
        except (AttributeError, IndexError) as exc:
            raise ModelError("the model returned no choices", body=str(response)[:2000]) from exc
        message = choice.message
        calls = tuple(
            parse_tool_call(call.id or f"call_{n}", call.function.name, call.function.arguments)
            for n, call in enumerate(getattr(message, "tool_calls", None) or (), start=1)
        )
        legacy: Any = getattr(message, "function_call", None)
        if not calls and getattr(legacy, "name", None):
            # The deprecated one-call form (``functions``), read as the HTTP gateway reads it.
            calls = (parse_tool_call("call_1", str(legacy.name), legacy.arguments),)
        specific = getattr(message, "provider_specific_fields", None)
        refusal = getattr(message, "refusal", None) or (
            specific.get("refusal") if isinstance(specific, dict) else None
        )
        usage = getattr(response, "usage", None)
        return LLMResponse(
            message=AssistantMessage(
                content=message.content or None,
                tool_calls=calls,
                reasoning=getattr(message, "reasoning_content", None) or None,
            ),
            usage=TokenUsage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                cost_usd=self._cost(litellm, response),
                cache_read_tokens=_usage_detail(usage, "prompt_tokens_details", "cached_tokens"),
                reasoning_tokens=_usage_detail(
                    usage, "completion_tokens_details", "reasoning_tokens"
                ),
            ),
            model=str(getattr(response, "model", None) or self._model),
            finish_reason=_finish_reason(choice),
            refusal=str(refusal) if refusal else None,
        )

    def _token_cost(
        self, litellm: ModuleType, input_tokens: int, output_tokens: int, cached: int | None
    ) -> float | None:
        """What the tokens cost at litellm's prices for this model; ``None`` if it has none."""
        if not (input_tokens or output_tokens):
            return None
        try:
            prompt, completion = litellm.cost_per_token(
                model=self._model,
                prompt_tokens=input_tokens,
                completion_tokens=output_tokens,
                cache_read_input_tokens=cached or 0,
            )
        except Exception:
            return None  # litellm has no price for this model (a local server, say)
        return float(prompt) + float(completion)

    def _cost(self, litellm: ModuleType, response: Any) -> float | None:
        try:
            cost = litellm.completion_cost(completion_response=response, model=self._model)
        except Exception:
            return None  # litellm has no price for this model (a local server, say)
        return float(cost) if cost is not None else None


def _usage_detail(usage: Any, part: str, name: str) -> int | None:
    """A count from a part of litellm's usage (``prompt_tokens_details.cached_tokens``).

    ``None`` when the provider did not report it: litellm fills the parts with ``None`` then
    (or leaves them out), and may give them as objects or as dictionaries.
    """
    details = usage.get(part) if isinstance(usage, dict) else getattr(usage, part, None)
    value = details.get(name) if isinstance(details, dict) else getattr(details, name, None)
    try:
        return max(int(value), 0) if value is not None else None
    except (TypeError, ValueError):
        return None


async def _next_chunk(stream: Any, answer: StreamedAnswer) -> Any | None:
    """The stream's next chunk; ``None`` at its end, or once a finished answer's server stalls."""
    # litellm may hold a provider's finish reason back from the chunks it passes on.
    ended = answer.ended or (
        answer.usage is not None and getattr(stream, "received_finish_reason", None) is not None
    )
    return await next_unless_stalled(stream, ended=ended)


class _ProviderChunks:
    """The provider's own stream under litellm's wrapper, its chunks read on their way.

    litellm passes on no chunk that brings only a refusal (OpenAI's ``refusal``: what the
    model said instead of answering), so the refusal is read here, from the chunks as the
    provider sent them (``answer``). And neither litellm nor the openai client under it says
    whether the stream ended with ``[DONE]``, the protocol's end, which the HTTP gateway
    takes for a whole answer when no finish reason came: the client's event decoder is
    read on its way too (``done``), where the client has one.
    """

    def __init__(self, inner: AsyncIterable[Any]) -> None:
        self._inner = inner
        self._items: AsyncIterator[Any] | None = None
        self.answer = StreamedAnswer()
        self.done = False
        """The provider's stream held ``[DONE]``."""
        decoder = getattr(inner, "_decoder", None)
        if callable(getattr(decoder, "aiter_bytes", None)):
            inner._decoder = _DoneSeen(decoder, self)  # type: ignore[attr-defined]

    @classmethod
    def under(cls, stream: Any) -> _ProviderChunks | None:
        """Put one under litellm's ``stream``; ``None`` where it keeps no provider stream.

        A provider whose chunks are not OpenAI's is read all the same, to no effect.
        """
        inner = getattr(stream, "completion_stream", None)
        if not isinstance(inner, AsyncIterable):
            return None
        tap = cls(inner)
        stream.completion_stream = tap
        return tap

    async def error_answered(self) -> ModelError | None:
        """The error the server answered with instead of a stream, if it did.

        A JSON body holding an ``error`` with status 200 (Ollama's "model 'x' not found"), or
        a web page (a base URL pointing at a web interface, a proxy's login page): the
        openai client under litellm reads either as an event stream with no events, and
        what the server said was lost (a page passed for a cut answer, tried again). The
        body read here is read again by that client.
        """
        response = getattr(self._inner, "response", None)
        headers = getattr(response, "headers", None)
        if response is None or not isinstance(headers, Mapping):
            return None
        content_type = str(headers.get("content-type", ""))
        kind = content_type.split(";", 1)[0].strip().lower()
        if kind in PAGE_CONTENT_TYPES:
            page = (await response.aread())[:4000].decode(errors="replace")
            return page_instead_of_answer(page, content_type, str(response.url))
        if not (kind == "application/json" or kind.endswith("+json")):
            # Only a body that says it is JSON is read whole here: anything else may be a
            # stream (unlabelled, text/plain), whose cuts and stalls litellm's reading judges.
            return None
        try:
            payload = json.loads(await response.aread())
        except ValueError:
            return None
        if isinstance(payload, dict) and payload.get("error"):
            return stream_error(payload)
        return None

    def __aiter__(self) -> _ProviderChunks:
        return self

    async def __anext__(self) -> Any:
        if self._items is None:
            self._items = aiter(self._inner)
        chunk = await anext(self._items)
        self.answer.take(_chunk_dict(chunk))
        return chunk

    async def aclose(self) -> None:
        """Close the provider's stream, as litellm would have."""
        close = getattr(self._inner, "aclose", None) or getattr(self._inner, "close", None)
        if callable(close):
            result = close()
            if inspect.isawaitable(result):
                await result


class _DoneSeen:
    """The openai client's event decoder, noting ``[DONE]`` as the client reads past it."""

    def __init__(self, decoder: Any, seen: _ProviderChunks) -> None:
        self._decoder = decoder
        self._seen = seen

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        """The decoder's events, unchanged."""
        async for event in self._decoder.aiter_bytes(iterator):
            if str(getattr(event, "data", "")).startswith("[DONE]"):
                self._seen.done = True
            yield event

    def __getattr__(self, name: str) -> Any:
        return getattr(self._decoder, name)


def _chunk_dict(chunk: Any) -> dict[str, Any]:
    """A litellm stream chunk as the wire's dictionary (what ``StreamedAnswer`` reads)."""
    if isinstance(chunk, dict):
        return chunk
    dump = getattr(chunk, "model_dump", None)
    found = dump() if callable(dump) else None
    return found if isinstance(found, dict) else {}


def _count(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def provider_sent_usage(stream: Any) -> bool:
    """Whether the provider's own chunks held token counts.

    Asked to include usage, litellm ends every stream with a usage chunk, also when the
    provider sent none: it then counts the prompt's messages itself, without the tool
    schemas (8 tokens for a prompt of 1,800), and that count would pass for the server's.
    The wrapper keeps the provider's chunks in ``chunks``; a litellm without it is trusted.
    """
    received = getattr(stream, "chunks", None)
    if not isinstance(received, list):
        return True
    for chunk in received:
        usage = chunk.get("usage") if isinstance(chunk, dict) else getattr(chunk, "usage", None)
        if usage is not None:
            return True
    return False


def _finish_reason(choice: Any) -> str | None:
    """The finish reason of a whole answer's ``choice``, as the kernel must judge it.

    litellm maps what the provider sent to OpenAI's reasons, and every reason it does not
    know to ``stop``: a failed answer (``error``, Zhipu GLM's ``network_error``, vLLM's
    ``abort``) passed for a finished one. Where the map said ``stop``, the provider's own
    reason (kept in ``native_finish_reason``) is taken instead; the kernel reads ``end_turn``
    or ``eos`` as finished all the same.
    """
    mapped = getattr(choice, "finish_reason", None)
    native = (getattr(choice, "provider_specific_fields", None) or {}).get("native_finish_reason")
    if mapped == "stop" and isinstance(native, str) and native:
        return native
    return str(mapped) if mapped else None


def provider_finish_reason(stream: Any, chunks: list[Any]) -> str | None:
    """The finish reason the provider sent, or ``None`` when it sent none.

    litellm's stream wrapper ends every stream with a chunk saying ``finish_reason: stop``,
    also when the provider's stream was cut before its own finish reason, so the chunks cannot
    tell. The wrapper keeps what the provider really sent in ``received_finish_reason`` (or
    ``intermittent_finish_reason``, for providers that send it mid-stream); a litellm without
    them is read from the chunks.
    """
    if hasattr(stream, "received_finish_reason"):
        reason = getattr(stream, "received_finish_reason", None) or getattr(
            stream, "intermittent_finish_reason", None
        )
        return str(reason) if reason else None
    for chunk in reversed(chunks):
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "finish_reason", None):
                return str(choice.finish_reason)
    return None


def _response_headers(exc: Exception) -> Mapping[str, str] | None:
    headers = getattr(exc, "litellm_response_headers", None)
    if headers:
        return headers  # type: ignore[no-any-return]
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None)


_UNREAD_ANSWER = "invalid response from LLM endpoint. Received: "
"""How litellm words its error for a whole answer that is no JSON object (a 500 it makes up)."""


def map_litellm_error(litellm: ModuleType, exc: Exception, *, url: str | None = None) -> ModelError:
    """The kernel's error for a litellm (or openai) exception; vendor types stop here.

    ``url`` is the server the request went to, if one is configured: named in the error
    for an answer that was a web page.
    """
    errors = litellm.exceptions
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    body = str(getattr(exc, "message", None) or exc)[:4000]
    message = f"model call failed: {type(exc).__name__}: {body}"
    received = body.find(_UNREAD_ANSWER)
    if received >= 0:
        # What litellm received, as Python wrote it ('<!DOCTYPE html>...'): a page is the
        # same error the HTTP gateway gives, not a server failing with a 500.
        page = page_instead_of_answer(
            body[received + len(_UNREAD_ANSWER) :].lstrip("b'\""), None, url
        )
        if page is not None:
            return page
    try:
        retry_after = retry_after_seconds(_response_headers(exc))
    except Exception:  # a vendor object that is not the mapping it claims to be
        retry_after = None
    # litellm's own verdict knows other providers' wording; the shared list decides the
    # rest, so a server's refusal is judged as the HTTP gateway judges it.
    if isinstance(exc, errors.ContextWindowExceededError) or says_prompt_too_long(body, status):
        return ModelContextWindowError(message, status_code=status, body=body)
    if isinstance(exc, errors.Timeout):
        return ModelTimeoutError(message, status_code=status, body=body, retryable=True)
    if isinstance(exc, errors.RateLimitError):
        return ModelRateLimitError(
            message, status_code=status, body=body, retryable=True, retry_after_s=retry_after
        )
    if isinstance(exc, errors.AuthenticationError | errors.PermissionDeniedError):
        return ModelAuthenticationError(message, status_code=status, body=body)
    retryable = isinstance(exc, errors.APIConnectionError) or (status is not None and status >= 500)
    return ModelError(
        message,
        status_code=status,
        body=body,
        retryable=retryable,
        retry_after_s=retry_after if retryable else None,
    )


def _refuses_stream_options(exc: Exception) -> bool:
    """Whether the provider refused the request for its ``stream_options``.

    Azure's older API versions and strict proxies do: the request is then sent without them,
    as the HTTP gateway does.
    """
    status = getattr(exc, "status_code", None)
    return status in (400, 422) and "stream_options" in refused_members(str(exc))
