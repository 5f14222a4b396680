"""The OpenAI chat-completions wire format, shared by the gateways that speak it.

Messages and tool definitions as the protocol spells them, answers read back (a streamed one
assembled from its chunks, tool calls with arguments that are not a JSON object kept raw), and
the ``Retry-After`` a refusal carries. No vendor library
is imported here: both the litellm gateway and the plain HTTP one use these.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from core_agent.contracts.errors import (
    ModelAuthenticationError,
    ModelContextWindowError,
    ModelError,
    ModelRateLimitError,
)
from core_agent.contracts.llm_gateway import ToolDefinition
from shared.agent_protocol import (
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """A protocol message in the chat-completions wire format."""
    if isinstance(message, SystemMessage | UserMessage):
        return {"role": message.kind, "content": message.content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments)
                    if call.arguments is not None
                    else (call.raw_arguments or ""),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def to_openai_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tool definitions as the ``tools`` member of a request."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def arguments_text(value: Any) -> str | None:
    """Tool-call arguments as the JSON text the protocol specifies.

    Some servers send them as a JSON object rather than a string holding one (Ollama's
    native shape, some proxies): that object is written back as text.
    """
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def message_text(content: Any) -> str | None:
    """A message's ``content`` as text: a string, or the text parts of a list of parts."""
    if content is None or isinstance(content, str):
        return content or None
    if isinstance(content, list):
        parts = [
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        ]
        return "".join(parts) or None
    return str(content)


def reasoning_text(message: Mapping[str, Any]) -> str | None:
    """The reasoning a message or delta carries apart from its text, if any.

    ``reasoning_content`` (DeepSeek, vLLM and llama.cpp with a reasoning parser, LM Studio,
    litellm) or ``reasoning`` (OpenRouter, Ollama).
    """
    for name in ("reasoning_content", "reasoning"):
        text = message_text(message.get(name))
        if text:
            return text
    return None


@dataclass
class _ToolCallParts:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamedAnswer:
    """A streamed answer assembled from its chunks (as dictionaries): text, reasoning, calls.

    Reasoning is what the server sends apart from the text (``reasoning_text``); usage and
    the finish reason are kept too.

    Tool-call pieces are matched to calls the way servers actually send them: a piece whose id
    is known continues that call (unless it comes at an index no call had yet: some servers
    repeat one id for every call of an answer); otherwise one numbered with an ``index``
    continues that index's call, and one without continues the latest call (only the first piece
    of a call carries its id). A piece starts a new call when nothing matches, or when it names
    a function while the call it would continue already has a name and either another one or
    whole JSON arguments: servers that number every parallel call 0 (Ollama, some proxies) or
    send calls whole without index, as against servers that repeat the name, or give a call a
    new id, on every piece.
    """

    chunks: int = 0
    text: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    """Reasoning the server sends apart from the text (see ``reasoning_text``)."""
    calls: list[_ToolCallParts] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """What the model said instead of answering (OpenAI's ``refusal``), in pieces."""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    """The last usage the server sent; ``None`` when it sent none."""
    model: str | None = None
    ended: bool = False
    """The server said the answer is over: a finish reason in a chunk that brought nothing
    else, or usage after one. What may still come is bookkeeping (``[DONE]``, the body's
    end), not more of the answer."""
    _by_index: dict[int, int] = field(default_factory=dict)

    def take(self, chunk: Mapping[str, Any]) -> str:
        """Fold one chunk in; the text it adds to the answer."""
        self.chunks += 1
        if chunk.get("model"):
            self.model = str(chunk["model"])
        added: list[str] = []
        for choice in chunk.get("choices") or ():
            # The first choice (some servers send its index as null).
            if not isinstance(choice, dict) or (choice.get("index") or 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            content = message_text(delta.get("content"))
            if content:
                added.append(content)
            thought = reasoning_text(delta)
            if thought:
                self.thoughts.append(thought)
            refusal = message_text(delta.get("refusal"))
            if refusal:
                self.refusals.append(refusal)
            parts = delta.get("tool_calls") or ()
            parts = [parts] if isinstance(parts, dict) else parts
            if not isinstance(parts, list):
                parts = []
            legacy = delta.get("function_call")
            if not parts and isinstance(legacy, dict):
                # The deprecated one-call form (``functions``): pieces of its one call, no id;
                # a piece that names the function again (a closing one) still continues it.
                piece = dict(legacy)
                if self.calls:
                    piece.pop("name", None)
                parts = [{"function": piece}]
            for part in parts:
                if isinstance(part, dict):
                    self._take_call(part)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                if not content and not parts:
                    self.ended = True
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
            if self.finish_reason is not None:
                self.ended = True
        text = "".join(added)
        if text:
            self.text.append(text)
        return text

    def _take_call(self, part: Mapping[str, Any]) -> None:
        call_id = str(part["id"]) if part.get("id") else None
        function = part.get("function")
        function = function if isinstance(function, dict) else {}
        name = str(function["name"]) if function.get("name") else None
        raw_index = part.get("index")
        index = (
            raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        )
        # The latest call of that id: some servers repeat one id for every call of an answer.
        call = next((c for c in reversed(self.calls) if c.id == call_id), None) if call_id else None
        if call is not None and (
            _starts_another(call, name)
            or (
                index is not None
                and index not in self._by_index
                and self.calls.index(call) in self._by_index.values()
            )
        ):
            call = None  # another call under an id already used (a new index, or a new name)
        if call is None:
            position = self._by_index.get(index) if index is not None else len(self.calls) - 1
            if position is not None and position >= 0:
                known = self.calls[position]
                if not _starts_another(known, name):
                    call = known
        if call is None:
            call = self._new_call()
            if index is not None:
                self._by_index[index] = len(self.calls) - 1
        if call_id is not None and call.id is None:
            call.id = call_id
        if name and not call.name:
            call.name = name
        arguments = arguments_text(function.get("arguments"))
        if arguments:
            call.arguments.append(arguments)

    def _new_call(self) -> _ToolCallParts:
        self.calls.append(_ToolCallParts())
        return self.calls[-1]

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls, in the order they began (ids the server left out are made up).

        A call that only repeats the call before it, its id and name with no arguments (a
        server that names the call again on a closing piece), is no call of its own.
        """
        calls = [
            call
            for n, call in enumerate(self.calls)
            if n == 0
            or call.arguments
            or call.id is None
            or (call.id, call.name) != (self.calls[n - 1].id, self.calls[n - 1].name)
        ]
        return tuple(
            parse_tool_call(call.id or f"call_{n}", call.name, "".join(call.arguments) or None)
            for n, call in enumerate(calls, start=1)
        )

    def content(self) -> str | None:
        """The answer's text, if any."""
        return "".join(self.text) or None

    def reasoning(self) -> str | None:
        """The reasoning the server sent apart from the text, if any."""
        return "".join(self.thoughts) or None

    def refusal(self) -> str | None:
        """What the model said instead of answering, if it declined."""
        return "".join(self.refusals) or None


def _starts_another(known: _ToolCallParts, name: str | None) -> bool:
    """Whether a piece naming ``name`` begins a call after ``known`` rather than continuing it."""
    if name is None or not known.name:
        return False
    if name != known.name:
        return True
    try:
        return isinstance(json.loads("".join(known.arguments)), dict)
    except ValueError:
        return False


def listed_tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A whole answer's tool calls as the wire lists them (``tool_calls``).

    The deprecated one-call form (``function_call``, answering ``functions``; still sent by
    some servers and proxies) is that one call, with no id.
    """
    listed = message.get("tool_calls") or ()
    listed = [listed] if isinstance(listed, dict) else listed
    calls = [call for call in listed if isinstance(call, dict)] if isinstance(listed, list) else []
    legacy = message.get("function_call")
    if not calls and isinstance(legacy, dict) and legacy.get("name"):
        calls = [{"function": legacy}]
    return calls


def parse_tool_call(call_id: str, name: str, raw: Any) -> ToolCall:
    """A tool call; arguments that are not a JSON object are kept raw for the error message.

    ``raw`` is the arguments' JSON text (an object sent instead is taken as it is).
    """
    raw = arguments_text(raw)
    try:
        parsed = json.loads(raw) if raw and raw.strip() else {}
    except ValueError:
        parsed = None
    arguments = parsed if isinstance(parsed, dict) else None
    return ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw)


CONTEXT_WINDOW_PHRASES = (
    "context_length_exceeded",  # OpenAI's, Groq's error code
    "maximum context length",  # OpenAI, vLLM, Azure, OpenRouter, Mistral, DeepSeek
    "context length",  # Ollama, LM Studio ("loaded with context length of only"), SGLang
    "context window",
    "exceeds the available context",  # llama.cpp
    "maximum model length",  # vLLM V1 ("is longer than the maximum model length")
    "prompt is too long",  # Anthropic, Fireworks
    "prompt too long",  # Ollama
    "input is too long",
    "too many tokens",
    "too many input tokens",  # Bedrock
    "`inputs` tokens + `max_new_tokens` must be",  # TGI, Together, SageMaker
    "`inputs` must have less than",  # TGI
    "exceed context limit",
    "maximum context limit",
    "input tokens exceed the configured limit",
    "exceeds the maximum number of tokens allowed",  # Gemini
)
"""How servers say a prompt does not fit the model's window, lower case.

The one list both gateways judge by (``says_prompt_too_long``), so a server's wording is
trimmed for or failed on alike whichever gateway reached it; it holds every phrasing
litellm's own mapping knows for such servers, and those litellm misses.
"""

CONTEXT_WINDOW_STATUSES = frozenset({400, 413, 422})
"""The statuses a prompt too long is refused with: a refused request, not a failing server
(a 500 whose message mentions the window is the server's trouble, tried again)."""


def says_prompt_too_long(text: str, status: int | None = None) -> bool:
    """Whether an error ``text`` says the prompt does not fit (``CONTEXT_WINDOW_PHRASES``).

    With an HTTP ``status``, only a refusal (``CONTEXT_WINDOW_STATUSES``) can say so;
    without one (an error inside a 200 answer or a stream), the words alone decide.
    """
    if status is not None and status not in CONTEXT_WINDOW_STATUSES:
        return False
    lowered = text.lower()
    return any(phrase in lowered for phrase in CONTEXT_WINDOW_PHRASES)


def stream_error(payload: Mapping[str, Any], *, whole: bool = True) -> ModelError:
    """An error the server put in a 200 answer or mid-stream (vLLM, Ollama, proxies).

    Retryable, unless the answer was that error alone (``whole``) and its numeric ``code`` is
    an HTTP status that would fail the same request again (Ollama's "model 'x' not found"
    with ``code: 404``, a refused key), as that status would have. An error event inside a
    stream the server accepted is not such a status: vLLM and SGLang put ``code: 400`` on any
    failure while generating.
    """
    error = payload.get("error")
    detail = error.get("message") if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    body = str(detail or payload)[:4000]
    message = f"model call failed: {body}"
    if says_prompt_too_long(body):
        return ModelContextWindowError(message, status_code=status, body=body)
    if not whole:
        return ModelError(message, status_code=status, body=body, retryable=True)
    if status == 429:
        return ModelRateLimitError(message, status_code=status, body=body, retryable=True)
    if status in (401, 403):
        return ModelAuthenticationError(message, status_code=status, body=body)
    if status is not None and 400 <= status < 500 and status not in (408, 409):
        return ModelError(message, status_code=status, body=body)
    return ModelError(message, status_code=status, body=body, retryable=True)


PAGE_CONTENT_TYPES = frozenset(
    {"text/html", "application/xhtml+xml", "text/xml", "application/xml"}
)
"""Media types of a page rather than an API's answer (``page_instead_of_answer``)."""


def page_instead_of_answer(
    body: str, content_type: str | None, url: str | None
) -> ModelError | None:
    """The error for a successful answer that is a web page, not the API's JSON; else ``None``.

    A base URL that points at a server's web interface, or a proxy's login page, answers 200
    with HTML (labelled so, or starting with ``<``, which no JSON body or event stream does).
    Asking again gets the same page, so the error is not retryable and says where to look.
    """
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in PAGE_CONTENT_TYPES and not body.lstrip().startswith("<"):
        return None
    where = f"at {url} " if url else ""
    return ModelError(
        f"the model server {where}answered with a web page ({kind or 'HTML'}), not the "
        "chat-completions API's JSON: check AGENT_MODEL_API_BASE, which should be the API's "
        "base URL (such as http://localhost:1234/v1), and that no proxy or login page is "
        "in the way",
        body=body[:2000],
    )


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds a ``Retry-After`` (or ``retry-after-ms``) header asks to wait, if any.

    ``Retry-After`` is either seconds or an HTTP date; an unreadable value is ignored.
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        milliseconds = _number(lowered["retry-after-ms"])
        if milliseconds is not None:
            return max(milliseconds / 1000.0, 0.0)
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return max(seconds, 0.0)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def _number(value: str) -> float | None:
    """``value`` as a number of seconds, or ``None`` (``float`` also reads "nan")."""
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else number


_REFUSING = r"(?:unrecognized|unsupported|unknown|not supported|not permitted|not allowed|extra)"


def refused_members(error: str) -> set[str]:
    """The request members an error body says the server does not take.

    Only a refusal of the member itself: OpenAI's ``param`` of an unsupported parameter, a
    FastAPI 422's ``extra_forbidden`` location, or a message naming the member next to a
    word of refusal ("Unrecognized request argument supplied: stream_options"). An error that
    merely mentions one (vLLM's "'max_tokens' or 'max_completion_tokens' is too large", a
    422 echoing the request) refuses nothing.
    """
    try:
        payload: Any = json.loads(error)
    except ValueError:
        payload = None
    refused: set[str] = set()
    message = error
    if isinstance(payload, dict):
        detail = payload.get("detail")
        for item in detail if isinstance(detail, list) else ():
            loc = item.get("loc") if isinstance(item, dict) else None
            if item.get("type") == "extra_forbidden" and isinstance(loc, list) and loc:
                refused.add(str(loc[-1]))
        inner = payload.get("error")
        if isinstance(inner, dict):
            message = str(inner.get("message") or "")
            code = str(inner.get("code") or "")
            if inner.get("param") and code in ("unsupported_parameter", "unknown_parameter"):
                refused.add(str(inner["param"]))
        elif isinstance(inner, str):
            message = inner
        elif isinstance(detail, list):
            message = ""  # a FastAPI body: its members are read above, its echo is not prose
    for name in ("stream_options", "max_tokens"):
        quoted = rf"['\"`]?{name}['\"`]?"
        near = rf"{_REFUSING}[^.\n]{{0,60}}?{quoted}|{quoted}[^.\n]{{0,40}}?{_REFUSING}"
        if re.search(near, message, re.IGNORECASE):
            refused.add(name)
    return refused


AFTER_FINISH_S = 2.0
"""How long to wait, once the server said the answer is over (``StreamedAnswer.ended``), for
the rest of the stream (``[DONE]``, the body's end): the answer is whole, and a server that
stalls there is not waited for until the call's timeout (which then threw the answer away
and asked again)."""


async def next_unless_stalled(items: AsyncIterator[T], *, ended: bool) -> T | None:
    """The stream's next item; ``None`` at its end, or once an ended answer's server stalls.

    Stalls: sends nothing for ``AFTER_FINISH_S`` after the answer ended (``ended``).
    """
    if not ended:
        return await anext(items, None)
    with anyio.move_on_after(AFTER_FINISH_S):
        return await anext(items, None)
    logger.debug("the server sent nothing for %ss after its finish reason", AFTER_FINISH_S)
    return None
