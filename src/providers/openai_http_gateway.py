"""``ILLMGateway`` for an OpenAI-compatible server, spoken directly over HTTP (httpx).

llama.cpp, vLLM, Ollama's ``/v1``, LM Studio and most proxies speak the chat-completions
protocol. litellm reaches them too, but importing it takes seconds (about 2.7 s on a 2-core
machine), longer than the whole first answer of a local server; this gateway imports httpx
(about 0.1 s) and reads litellm's bundled price table as a file. It is the default for
``openai/<model>`` with ``AGENT_MODEL_API_BASE`` set (``AGENT_LLM_GATEWAY=litellm`` keeps
litellm); every other model goes through litellm.

What it owes the kernel is what the litellm gateway owes it: one request per call (the kernel
retries, with backoff, a deadline and a circuit breaker), every failure a ``ModelError`` with
the server's status and body, a stream that ends without the server's finish reason (and
without ``[DONE]``), an empty body, an empty answer or tool-call arguments cut off by the
token limit a retryable ``ModelIncompleteError``, and ``Retry-After`` passed on.

Servers differ in what they accept beside the messages: some refuse ``stream_options`` (a
400 naming it: older servers, strict proxies), OpenAI's reasoning models refuse
``max_tokens`` for ``max_completion_tokens``. A refusal that names one of them is not the
request's fault: the request is sent again at once without it (or under the other name), and
the gateway remembers it for its later calls (``_ServerQuirks``); such a resend is part of
the call, not a retry.

Connections are kept for the calling event loop while a ``connections()`` scope is open on
it (the kernel holds one while it is entered): against a remote ``https`` server a new
connection costs a TCP and a TLS handshake, tens to hundreds of milliseconds a call. A
client's pooled connections belong to the loop that opened them and one gateway serves
whatever loop calls it (a host's, a sync facade's thread, a test's), so outside a scope a call
opens its own client and closes it when it ends. A kept connection that the server closed
meanwhile fails like any dropped connection: a retryable error the kernel's retry takes care
of. The TLS settings are built once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import ssl
import threading
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

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
from providers import litellm_price_table
from providers.openai_wire import (
    StreamedAnswer,
    listed_tool_calls,
    message_text,
    next_unless_stalled,
    page_instead_of_answer,
    parse_tool_call,
    reasoning_text,
    refused_members,
    retry_after_seconds,
    says_prompt_too_long,
    stream_error,
    to_openai_message,
    to_openai_tools,
)
from shared.agent_protocol import AssistantMessage, TokenUsage

logger = logging.getLogger(__name__)

_EVENT_STREAM_STARTS = (b"data:", b":", b"event:", b"id:", b"retry:")
"""How a body that is an event stream, whatever its label, begins."""

PROVIDER_PREFIX = "openai/"

_tls_lock = threading.Lock()
_tls: ssl.SSLContext | None = None


def _tls_context() -> ssl.SSLContext:
    """The system's CA bundle as httpx would load it, built once (it costs ~20 ms)."""
    global _tls
    with _tls_lock:
        if _tls is None:
            import certifi

            _tls = ssl.create_default_context(cafile=certifi.where())
        return _tls


class OpenAIHttpGateway(ILLMGateway):
    """POSTs ``/chat/completions`` to ``api_base``; maps what comes back to the kernel's types.

    ``model`` is ``openai/<name>`` (the name the server knows after the prefix); ``timeout_s``
    bounds each connect and each read of one request, as the litellm gateway's does.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        temperature: float | None = None,
    ) -> None:
        self._model = model
        self._server_model = model.removeprefix(PROVIDER_PREFIX)
        self._url = api_base.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._timeout = httpx.Timeout(timeout_s)
        self._temperature = temperature
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        """The client kept for each loop with a ``connections()`` scope open."""
        self._quirks = _ServerQuirks()

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> OpenAIHttpGateway:
        """Configured from ``AGENT_MODEL*``.

        Raises:
            ModelNotConfiguredError: No model, or no ``AGENT_MODEL_API_BASE`` to send it to.
            ConfigurationError: ``AGENT_MODEL_API_BASE`` is no http(s) URL with a host.
        """
        model = settings.resolved_model
        if not model:
            raise ModelNotConfiguredError(MODEL_CONFIGURATION_HELP)
        api_base = settings.checked_model_api_base
        if not api_base:
            raise ModelNotConfiguredError(
                "AGENT_LLM_GATEWAY=openai_http needs AGENT_MODEL_API_BASE, the server's URL "
                "(e.g. http://localhost:8080/v1); other providers go through litellm"
            )
        return cls(
            model,
            api_base=api_base,
            api_key=settings.model_api_key.get_secret_value() if settings.model_api_key else None,
            timeout_s=settings.model_timeout_s,
            temperature=settings.model_temperature,
        )

    @property
    def model_name(self) -> str:
        """The configured model string (``openai/<name>``)."""
        return self._model

    def context_window(self) -> int | None:
        """The model's input window in litellm's bundled table; ``None`` for an unlisted model.

        A local model is seldom listed: set ``AGENT_CONTEXT_MAX_TOKENS`` for it.
        """
        return litellm_price_table.context_window(self._model)

    def warm_up(self) -> None:
        """Read the price table and build the TLS settings; never raises, never connects."""
        try:
            litellm_price_table.context_window(self._model)
            if self._url.startswith("https:"):
                _tls_context()
        except Exception:
            logger.debug("warming the OpenAI HTTP gateway failed", exc_info=True)

    def _headers(self) -> dict[str, str]:
        # Like the openai SDK under litellm: the configured key, else OPENAI_API_KEY, else
        # the placeholder a local server ignores (sending no key at all fails on some).
        key = self._api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY
        return {"Authorization": f"Bearer {key}"}

    def _body(self, request: LLMRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._server_model,
            "messages": [to_openai_message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        temperature = request.temperature if request.temperature is not None else self._temperature
        if temperature is not None:
            body["temperature"] = temperature
        if request.max_tokens is not None:
            body[self._quirks.max_tokens_name] = request.max_tokens
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if stream:
            body["stream"] = True
            if self._quirks.stream_options:
                body["stream_options"] = {"include_usage": True}
        return body

    def _new_client(self) -> httpx.AsyncClient:
        verify: ssl.SSLContext | bool = _tls_context() if self._url.startswith("https:") else True
        return httpx.AsyncClient(
            timeout=self._timeout,
            verify=verify,
            trust_env=True,
            # As many calls at once as the tasks make (each had its own connection before
            # connections were kept); only how many idle ones are kept is bounded.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )

    @asynccontextmanager
    async def connections(self) -> AsyncIterator[None]:
        """Keep connections for calls from this event loop until the block ends.

        A scope opened inside another on the same loop leaves them to the outer one.
        """
        loop = asyncio.get_running_loop()
        if loop in self._pools:
            yield
            return
        client = self._new_client()
        self._pools[loop] = client
        try:
            yield
        finally:
            if self._pools.get(loop) is client:
                del self._pools[loop]
            await client.aclose()

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        """The loop's kept client; else one for this call, closed when it ends."""
        kept = self._pools.get(asyncio.get_running_loop())
        if kept is not None and not kept.is_closed:
            yield kept
            return
        async with self._new_client() as client:
            yield client

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One non-streamed completion."""
        while True:  # sent again only when a refusal taught something (at most twice)
            body = self._body(request, stream=False)
            try:
                async with self._client() as client:
                    response = await client.post(self._url, json=body, headers=self._headers())
            except Exception as exc:
                raise request_error(exc, self._url) from exc
            if response.status_code < 300:
                break
            if response.status_code < 400:
                raise redirect_error(response)
            if not self._quirks.learn(response.status_code, response.text, body):
                raise status_error(response.status_code, response.text, response.headers)
        return checked_response(
            self._to_response(
                _json_body(
                    response.content,
                    content_type=response.headers.get("content-type", ""),
                    url=self._url,
                )
            )
        )

    @asynccontextmanager
    async def _accepted(self, request: LLMRequest) -> AsyncIterator[httpx.Response]:
        """The streamed response to ``request``, once the server accepted it.

        A refusal that taught the gateway something (``_ServerQuirks``) sends the request
        again, at most twice; any other one is raised.
        """
        while True:
            sent = self._body(request, stream=True)
            async with (
                self._client() as client,
                client.stream("POST", self._url, json=sent, headers=self._headers()) as response,
            ):
                if response.status_code < 300:
                    yield response
                    return
                await response.aread()
                if response.status_code < 400:
                    raise redirect_error(response)
                if not self._quirks.learn(response.status_code, response.text, sent):
                    raise status_error(response.status_code, response.text, response.headers)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """Streamed completion (server-sent events); the last item is the whole answer.

        A server that answers a streamed request with one JSON body is read as that body.
        Token counts are the server's usage chunk; a server that sends none reports 0 (the
        kernel then counts them itself, see ``EstimatedUsageGateway``).

        Raises:
            ModelIncompleteError: The stream ended before the server's finish reason and
                ``[DONE]`` (a connection cut mid-answer), or its answer is empty or cut.
        """
        turn = StreamedAnswer()
        done = False
        try:
            async with self._accepted(request) as response:
                content_type = response.headers.get("content-type", "")
                if "text/event-stream" not in content_type:
                    body = await response.aread()
                    if not body.lstrip().startswith(_EVENT_STREAM_STARTS):
                        whole = self._to_response(
                            _json_body(body, content_type=content_type, url=self._url)
                        )
                        if whole.message.content:
                            yield LLMTextDelta(whole.message.content)
                        yield checked_response(whole)
                        return
                    # An event stream labelled as something else (or not at all).
                    events = _events_of(body)
                else:
                    events = _events(response)
                while (data := await next_unless_stalled(events, ended=turn.ended)) is not None:
                    if data.strip() == "[DONE]":
                        done = True
                        break
                    if not data.strip():
                        continue
                    text = turn.take(_chunk(data))
                    if text:
                        yield LLMTextDelta(text)
                if done:
                    await _read_to_the_end(events)
        except ModelError:
            raise
        except Exception as exc:
            raise request_error(exc, self._url) from exc
        if not turn.chunks:
            raise ModelIncompleteError("the model's stream ended without any chunk", retryable=True)
        if turn.finish_reason is None and not done:
            raise ModelIncompleteError(
                "the model's stream ended before the server said it was finished (no finish "
                "reason, no [DONE]): the answer was cut off",
                retryable=True,
            )
        yield checked_response(
            self._response(
                content=turn.content(),
                reasoning=turn.reasoning(),
                calls=turn.tool_calls(),
                usage=turn.usage,
                model=turn.model,
                finish_reason=turn.finish_reason,
                refusal=turn.refusal(),
            )
        )

    def _to_response(self, data: dict[str, Any]) -> LLMResponse:
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ModelError(
                "the model returned no choices", body=json.dumps(data)[:2000], retryable=True
            ) from exc
        if not isinstance(message, dict):
            raise ModelError(
                "the model's answer has no message", body=json.dumps(data)[:2000], retryable=True
            )
        calls = tuple(
            parse_tool_call(
                str(call.get("id") or f"call_{n}"),
                str(_function(call).get("name") or ""),
                _function(call).get("arguments"),
            )
            for n, call in enumerate(listed_tool_calls(message), start=1)
        )
        return self._response(
            content=message_text(message.get("content")),
            reasoning=reasoning_text(message),
            calls=calls,
            usage=data.get("usage"),
            model=data.get("model"),
            finish_reason=choice.get("finish_reason"),
            refusal=message_text(message.get("refusal")),
        )

    def _response(
        self,
        *,
        content: str | None,
        reasoning: str | None,
        calls: tuple[Any, ...],
        usage: Any,
        model: Any,
        finish_reason: Any,
        refusal: str | None = None,
    ) -> LLMResponse:
        usage = usage if isinstance(usage, dict) else {}
        input_tokens = _count(usage.get("prompt_tokens"))
        output_tokens = _count(usage.get("completion_tokens"))
        cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
        return LLMResponse(
            message=AssistantMessage(content=content, tool_calls=calls, reasoning=reasoning),
            usage=TokenUsage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=litellm_price_table.cost_usd(
                    self._model, input_tokens, output_tokens, cache_read_tokens=cached or 0
                ),
                cache_read_tokens=cached,
                reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
            ),
            # The configured name, as litellm reports it: traces and prices key on it.
            model=self._model if not model else f"{PROVIDER_PREFIX}{model}",
            finish_reason=str(finish_reason) if finish_reason else None,
            refusal=refusal,
        )


DRAIN_AFTER_DONE_S = 0.25
"""How long to wait, after ``[DONE]``, for the rest of the body (its chunked ending)."""


async def _read_to_the_end(events: AsyncIterator[Any]) -> None:
    """Read what the server sends after ``[DONE]``, briefly, and stop there.

    A connection is kept for the next call only once its response was read to its end; a
    server that leaves the body open after ``[DONE]`` is not waited for (its connection is
    closed instead). The answer is complete either way.
    """
    with anyio.move_on_after(DRAIN_AFTER_DONE_S):
        try:
            async for _ in events:
                pass
        except httpx.HTTPError:
            pass  # the answer is whole; only the connection is lost


def _count(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def _detail(usage: dict[str, Any], part: str, name: str) -> int | None:
    """A count from a part of the usage (``prompt_tokens_details.cached_tokens``), if sent."""
    details = usage.get(part)
    value = details.get(name) if isinstance(details, dict) else None
    return _count(value) if value is not None else None


def _json_body(content: bytes, *, content_type: str, url: str) -> dict[str, Any]:
    """A whole answer's JSON object; a web page, an empty or unreadable body is an error."""
    if not content.strip():
        raise ModelIncompleteError("the model server answered with an empty body", retryable=True)
    try:
        data = json.loads(content)
    except ValueError as exc:
        text = content[:4000].decode(errors="replace")
        page = page_instead_of_answer(text, content_type, url)
        if page is not None:
            raise page from exc
        # Anything else unreadable may be a body cut on its way: asked again.
        raise ModelError(
            "the model server's answer is not JSON", body=text[:2000], retryable=True
        ) from exc
    if not isinstance(data, dict):
        raise ModelError("the model server's answer is not a JSON object", retryable=True)
    if data.get("error"):
        raise stream_error(data)
    return data


def _chunk(data: str) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        raise ModelIncompleteError(
            f"the model's stream held a chunk that is not JSON: {data[:200]!r}", retryable=True
        ) from exc
    if not isinstance(chunk, dict):
        raise ModelIncompleteError(
            "the model's stream held a chunk that is not an object", retryable=True
        )
    if chunk.get("error"):  # also beside choices (OpenRouter's error mid-stream)
        raise stream_error(chunk, whole=False)
    return chunk


async def _events(response: httpx.Response) -> AsyncIterator[str]:
    """The data of each event of a streamed response, read as UTF-8 whatever its charset says.

    JSON is UTF-8 (RFC 8259): a server that labels its stream ``charset=ISO-8859-1`` would
    otherwise have its Chinese turned into mojibake.
    """
    response.encoding = "utf-8"
    async for data in _events_in(response.aiter_text()):
        yield data


def _as_error(data: str) -> str:
    """An ``event: error`` event's data as an error chunk, whatever shape the server gave it."""
    try:
        payload: Any = json.loads(data)
    except ValueError:
        payload = data
    if isinstance(payload, dict) and payload.get("error"):
        return data
    return json.dumps({"error": payload or "the server sent an error event"})


def _function(call: dict[str, Any]) -> dict[str, Any]:
    """A wire tool call's ``function`` member (an empty one when it is not an object)."""
    function = call.get("function")
    return function if isinstance(function, dict) else {}


async def _events_of(body: bytes) -> AsyncIterator[str]:
    """The data of each event of an event stream already read whole."""

    async def whole() -> AsyncIterator[str]:
        yield body.decode("utf-8", errors="replace")

    async for data in _events_in(whole()):
        yield data


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FIELDS = ("data", "event", "id", "retry")
_STRAY_KEPT_CHARS = 1_000_000  # a whole JSON body told as a stream is parsed from these


async def _events_in(texts: AsyncIterator[str]) -> AsyncIterator[str]:
    """The data of each event of an event stream, read from its text as it comes.

    Lines end at CR, LF or CRLF only, as the event-stream format says (not at the other
    breaks ``splitlines`` knows, which a model's text may hold); an ``error`` event's data
    is made an error chunk (``_as_error``). A body that holds no event at all but lines that
    are none of the format's (a bare JSON error under an event-stream label) is given as
    one event, so that what the server said is read rather than lost as "no chunk" (as
    httpx-sse, used before, drops every line that is not a field, with no way to see them).
    """
    kind, data = "", list[str]()
    stray, stray_chars, found = list[str](), 0, False

    def take(line: str) -> str | None:
        nonlocal kind, data, stray_chars
        if not line:
            event = None
            if data:
                joined = "\n".join(data)
                event = _as_error(joined) if kind == "error" else joined
            kind, data = "", []
            return event
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
        elif name == "event":
            kind = value.strip()
        elif name not in _FIELDS and name and stray_chars < _STRAY_KEPT_CHARS:
            stray.append(line)
            stray_chars += len(line)
        return None

    partial: list[str] = []
    after_cr, started = False, False
    async for text in texts:
        if not started and text:
            started = True
            text = text.removeprefix("\ufeff")  # the format's byte order mark, not a field
        if after_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split between two pieces: that line has ended
        after_cr = text.endswith("\r")
        pieces = _LINE_BREAK.split(text)
        partial.append(pieces[0])
        if len(pieces) == 1:
            continue
        lines = ["".join(partial), *pieces[1:-1]]
        partial = [pieces[-1]]
        for line in lines:
            if (event := take(line)) is not None:
                found = True
                yield event
    for line in ("".join(partial), ""):
        if (event := take(line)) is not None:
            found = True
            yield event
    if not found and stray:
        yield _whole_body("\n".join(stray))


def _whole_body(text: str) -> str:
    """A body with no event in it, as one event: what the server answered instead of a stream.

    A JSON error is raised as the whole answer's error (its status counts); a whole
    completion (``message``, not ``delta``) becomes one chunk of the same answer; anything
    else goes on as it is, to be reported as what it is.
    """
    try:
        payload = json.loads(text)
    except ValueError:
        return text
    if not isinstance(payload, dict):
        return text
    if payload.get("error"):
        raise stream_error(payload)
    choices = payload.get("choices")
    if (
        isinstance(choices, list)
        and choices
        and all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices)
    ):
        payload["choices"] = [
            {**{k: v for k, v in c.items() if k != "message"}, "delta": c["message"]}
            for c in choices
        ]
        return json.dumps(payload)
    return text


def _error_message(text: str) -> str:
    """The server's own words: ``error.message`` of a JSON error body, else the text."""
    try:
        payload = json.loads(text)
    except ValueError:
        return text.strip()[:4000]
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:4000]
        if isinstance(error, str):
            return error[:4000]
    return text.strip()[:4000]


def status_error(status: int, text: str, headers: httpx.Headers | None = None) -> ModelError:
    """The kernel's error for an HTTP error status from the model server."""
    body = _error_message(text)
    message = f"model call failed: HTTP {status}: {body}"
    retry_after = retry_after_seconds(dict(headers) if headers else None)
    if says_prompt_too_long(text, status):
        return ModelContextWindowError(message, status_code=status, body=body)
    if status == 429:
        return ModelRateLimitError(
            message, status_code=status, body=body, retryable=True, retry_after_s=retry_after
        )
    if status in (401, 403):
        return ModelAuthenticationError(message, status_code=status, body=body)
    if status in (408, 409) or status >= 500:
        return ModelError(
            message, status_code=status, body=body, retryable=True, retry_after_s=retry_after
        )
    return ModelError(message, status_code=status, body=body)


def redirect_error(response: httpx.Response) -> ModelError:
    """The kernel's error for a redirect: not followed, and not retryable.

    A POST redirected with 301, 302 or 303 comes back as a GET without its body, and a
    redirect from ``http`` to ``https`` would be paid on every call: the base URL is wrong,
    and the error says which one the server points to.
    """
    status = response.status_code
    location = response.headers.get("location")
    if not location:
        return ModelError(
            f"model call failed: HTTP {status}: the server redirects, without saying where "
            "(no Location); check AGENT_MODEL_API_BASE",
            status_code=status,
            body=response.text[:4000],
        )
    target = str(response.url.join(location))
    path = target.split("?")[0]
    advice = (
        f"set AGENT_MODEL_API_BASE to {path.removesuffix('/chat/completions')}"
        if path.endswith("/chat/completions")
        else "check AGENT_MODEL_API_BASE"
    )
    return ModelError(
        f"model call failed: HTTP {status}: the server redirects to {target}; {advice}",
        status_code=status,
        body=location,
    )


def request_error(exc: Exception, url: str) -> ModelError:
    """The kernel's error for what sending a request to ``url`` raised.

    Below HTTP (connection refused or cut, a timeout), retryable; a redirect to a URL httpx
    cannot read is not (httpx raises it as a protocol error). A URL that cannot be
    requested at all is not: httpx's ``InvalidURL`` or ``UnsupportedProtocol``, or what the
    socket raises for a port past 65535 (an ``OverflowError``, inside anyio's exception
    group). ``from_settings`` refuses such an ``AGENT_MODEL_API_BASE`` before any call; this
    covers a gateway built directly.
    """
    if isinstance(exc, httpx.RemoteProtocolError) and "location header" in str(exc).lower():
        # A redirect whose target httpx cannot even read: a redirect all the same, which
        # asking again will not change (see ``redirect_error``).
        return ModelError(
            f"model call failed: the server at {url} redirects to a URL that cannot be read "
            f"({exc}); check AGENT_MODEL_API_BASE"
        )
    if isinstance(exc, httpx.HTTPError) and not isinstance(exc, httpx.UnsupportedProtocol):
        detail = str(exc) or (
            "nothing from the server within AGENT_MODEL_TIMEOUT_S"
            if isinstance(exc, httpx.TimeoutException)
            else "no detail"
        )
        message = f"model call failed: {type(exc).__name__}: {detail}"
        if isinstance(exc, httpx.TimeoutException):
            return ModelTimeoutError(message, retryable=True)
        return ModelError(message, retryable=True)
    cause: BaseException = exc
    while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
        cause = cause.exceptions[0]
    return ModelError(
        f"model call failed: {url} cannot be requested (check AGENT_MODEL_API_BASE): "
        f"{type(cause).__name__}: {cause}"
    )


class _ServerQuirks:
    """What the server refused beside the messages, learnt from its refusals."""

    def __init__(self) -> None:
        self.stream_options = True
        """Whether to ask for the usage chunk (``stream_options``)."""
        self.max_tokens_name = "max_tokens"
        """What the answer's token limit is called (``max_completion_tokens`` for OpenAI's
        reasoning models)."""

    def learn(self, status: int, error: str, sent: Mapping[str, Any]) -> bool:
        """Take in the refusal of the request ``sent``: whether to send it again.

        Yes when it names a member ``sent`` had that will be left out or renamed from now on
        (also when a call made at the same time taught it first), so each resend of a call
        has one of them fewer: a call is sent again at most twice.
        """
        if status not in (400, 422):
            return False
        refused = refused_members(error)
        if "stream_options" in sent and "stream_options" in refused:
            self.stream_options = False
            return True
        if "max_tokens" in sent and "max_tokens" in refused and "max_completion_tokens" in error:
            self.max_tokens_name = "max_completion_tokens"
            return True
        return False
