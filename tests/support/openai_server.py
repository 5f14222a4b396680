"""A real HTTP server on loopback that speaks the OpenAI chat-completions protocol.

Tests queue replies (text, tool calls, errors) and point litellm at ``server.base_url``, so
litellm's real client code (the openai SDK over httpx) runs over a socket. Streaming follows
the protocol: ``data: {chunk}`` lines, tool-call arguments split across chunks, a usage chunk
when ``stream_options.include_usage`` is set, then ``data: [DONE]``. A stream is
connection-delimited (``Connection: close``, no length) unless the server was made with
``chunked=True``.

Fault injection: a reply may carry a ``fault`` (see ``Fault``) that breaks the answer the way
real providers and networks do, and an error reply may carry ``retry_after``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import socket
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Fault = Literal[
    "hang",
    "reset",
    "cut",
    "empty",
    "truncated_arguments",
    "stall_after_finish",
    "error_200",
    "error_200_events",
    "error_mid_stream",
    "whole_as_events",
    "web_page",
]
Dialect = Literal[
    "index_zero",
    "no_index",
    "arguments_object",
    "content_parts",
    "error_null",
    "index_null",
    "plain_text_events",
    "latin1_events",
    "function_call",
]
"""How servers other than OpenAI's shape valid answers (see ``Reply.dialect``)."""
"""How a reply goes wrong.

* ``hang``: nothing is sent until the server closes (the client's timeout or deadline ends it);
* ``reset``: a stream stops halfway and the socket is reset (TCP RST);
* ``cut``: a stream stops halfway and the connection closes cleanly, with no finish reason
  and no ``[DONE]`` (what a proxy dropping a connection-delimited response looks like);
* ``empty``: status 200 with an empty body;
* ``truncated_arguments``: tool-call arguments cut in half, ``finish_reason: length``;
* ``error_200``: status 200 with a JSON error body, ``error_message`` with ``code: 404`` (as
  Ollama answers for a model it does not have), streamed or not;
* ``error_200_events``: the same body, labelled ``text/event-stream`` (no ``data:`` line);
* ``error_mid_stream``: half a stream, then an error event with ``code: 400`` and ``[DONE]``
  (what vLLM and SGLang send when generation fails after the request was accepted);
* ``whole_as_events``: a whole completion (``message``, not chunks), labelled
  ``text/event-stream``.
* ``web_page``: status 200 with an HTML page (``error_message`` is its body), labelled
  ``text/html`` (a base URL pointing at a server's web interface, a proxy's login page).
"""


@dataclass
class Reply:
    """One scripted answer: text and/or tool calls, or an HTTP error."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Each ``{"name": ..., "arguments": <dict or raw string>}``."""
    status: int = 200
    error_message: str = ""
    fault: Fault | None = None
    retry_after: str | None = None
    """``Retry-After`` header of an error reply (seconds or an HTTP date)."""
    cached_tokens: int | None = None
    """Reported as ``usage.prompt_tokens_details.cached_tokens`` (as OpenAI does) when set."""
    reasoning_tokens: int | None = None
    """Reported as ``usage.completion_tokens_details.reasoning_tokens`` when set."""
    report_usage: bool = True
    """``False``: no ``usage`` in the body and no usage chunk (servers that never count)."""
    dialect: Dialect | None = None
    """A shape other servers give the same answer: every parallel tool call numbered 0
    (Ollama, some proxies); tool-call pieces with no index, the id on the first only;
    arguments as a JSON object instead of a string; content as a list of text parts;
    ``"error": null`` in every chunk; a choice's index null; an event stream labelled
    ``text/plain``, or ``charset=ISO-8859-1``; the one tool call in the deprecated
    ``function_call`` form (no id, ``finish_reason: function_call``)."""
    reasoning: str | None = None
    """Sent apart from the text as ``reasoning_content`` (DeepSeek, vLLM and llama.cpp with a
    reasoning parser), before it when streamed."""
    finish_reason: str | None = None
    """Sent instead of the usual one (``length``: the output token limit cut the answer
    off; ``content_filter``: the provider's filter stopped it)."""
    location: str | None = None
    """A redirect's ``Location`` (with a 3xx ``status``; ``error_message`` is its body)."""
    refusal: str | None = None
    """Sent as OpenAI's ``refusal`` (what the model says instead of answering), with the
    content null; streamed in pieces after an empty one."""
    error_body: dict[str, Any] | None = None
    """An error reply's whole JSON body as the server words it (LM Studio's ``error`` string,
    TGI's ``error_type``), sent instead of the usual ``error`` object."""


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class OpenAIServer:
    """Start with ``with OpenAIServer() as server:``; queue replies with ``server.reply(...)``."""

    def __init__(self, embedding_dimension: int = 16, *, chunked: bool = False) -> None:
        self.replies: deque[Reply] = deque()
        self.chunked = chunked
        self._closing = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        """TCP connections accepted so far (a client that keeps them opens fewer)."""
        self.authorizations: list[str | None] = []
        """The ``Authorization`` header of each chat request."""
        self.refused_parameters: dict[str, str] = {}
        """Request members the server refuses with a 400 carrying the given message (a strict
        server); a refused request takes no reply and is kept in ``refusals``."""
        self.refusals: list[dict[str, Any]] = []
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        """Answers a chat request when no reply is queued (given the request's body)."""
        self.embedding_requests: list[dict[str, Any]] = []
        self.embedding_dimension = embedding_dimension
        self.embedding_failures: deque[int] = deque()
        """HTTP statuses the next embedding requests fail with, in order."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/embeddings"):
                    status, payload = server._embeddings(body)
                    self._json(status, payload)
                    return
                if not self.path.endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                refused = next((p for p in server.refused_parameters if p in body), None)
                if refused is not None:  # a strict server: the queued reply stays queued
                    with server._lock:
                        server.refusals.append(body)
                    message = server.refused_parameters[refused]
                    self._json(400, {"error": {"message": message, "type": "invalid_request"}})
                    return
                with server._lock:
                    server.requests.append(body)
                    server.authorizations.append(self.headers.get("Authorization"))
                    if server.replies:
                        reply: Reply | None = server.replies.popleft()
                    else:
                        reply = server.responder(body) if server.responder else None
                if reply is None:
                    self._json(
                        500,
                        {
                            "error": {
                                "message": "test server has no reply queued",
                                "type": "server_error",
                            }
                        },
                    )
                    return
                if reply.fault == "hang":
                    server._closing.wait()
                    self.close_connection = True
                    return
                if reply.location is not None:
                    data = reply.error_message.encode()
                    self.send_response(reply.status)
                    self.send_header("Location", reply.location)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if reply.status != 200:
                    self._json(
                        reply.status,
                        reply.error_body
                        or {
                            "error": {
                                "message": reply.error_message,
                                "type": "test_error",
                                "code": None,
                            }
                        },
                        headers={"Retry-After": reply.retry_after} if reply.retry_after else {},
                    )
                    return
                if reply.fault in ("error_200", "error_200_events"):
                    data = json.dumps(
                        {"error": {"message": reply.error_message, "code": 404}}
                    ).encode()
                    self.send_response(200)
                    self.send_header(
                        "Content-Type",
                        "text/event-stream"
                        if reply.fault == "error_200_events"
                        else "application/json",
                    )
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if reply.fault == "web_page":
                    data = reply.error_message.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if reply.fault == "whole_as_events":
                    data = json.dumps(server._completion(body, reply)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if reply.fault == "empty":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._json(200, server._completion(body, reply))

            def _json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                content_type = {
                    "plain_text_events": "text/plain",
                    "latin1_events": "text/event-stream; charset=ISO-8859-1",
                }.get(reply.dialect or "", "text/event-stream")
                self.send_header("Content-Type", content_type)
                self.send_header("Cache-Control", "no-cache")
                if server.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                chunks = server._chunks(body, reply)
                if reply.fault in ("reset", "cut", "error_mid_stream"):
                    # Halfway through the answer, before any finish reason.
                    chunks = chunks[: max(2, len(chunks) // 2)]
                if reply.fault == "error_mid_stream":
                    message = reply.error_message or "Background loop has errored already."
                    chunks.append({"error": {"object": "error", "message": message, "code": 400}})
                for chunk in chunks:
                    self._send(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
                if reply.fault == "reset":
                    # SO_LINGER 0: close() sends RST instead of FIN.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                elif reply.fault == "stall_after_finish":
                    # The whole answer and its usage, then neither [DONE] nor the body's end.
                    server._closing.wait()
                    self.close_connection = True
                    return
                elif reply.fault != "cut":
                    self._send(b"data: [DONE]\n\n")
                    if server.chunked:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                # A chunked answer that ended leaves the connection open for the next request,
                # as servers do; the other ways end with the connection.
                if not server.chunked or reply.fault in ("reset", "cut"):
                    self.close_connection = True

            def _send(self, data: bytes) -> None:
                if server.chunked:
                    data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
                self.wfile.write(data)
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reply(
        self,
        content: str | None = None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        status: int = 200,
        error_message: str = "",
        fault: Fault | None = None,
        retry_after: str | None = None,
        cached_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        report_usage: bool = True,
        dialect: Dialect | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        refusal: str | None = None,
        location: str | None = None,
        error_body: dict[str, Any] | None = None,
    ) -> None:
        self.replies.append(
            Reply(
                content,
                tool_calls or [],
                status,
                error_message,
                fault,
                retry_after,
                cached_tokens,
                reasoning_tokens,
                report_usage,
                dialect,
                reasoning,
                finish_reason,
                location,
                refusal,
                error_body,
            )
        )

    @staticmethod
    def embedding_of(text: str, dimension: int) -> list[float]:
        """The server's deterministic vector for ``text`` (a hash of it, unit length)."""
        digest = hashlib.sha256(text.encode()).digest()
        raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dimension)]
        norm = math.sqrt(sum(v * v for v in raw)) or 1.0
        return [v / norm for v in raw]

    def _embeddings(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.embedding_requests.append(body)
            failure = self.embedding_failures.popleft() if self.embedding_failures else None
        if failure is not None:
            return failure, {"error": {"message": "injected failure", "type": "test_error"}}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        data = []
        for index, text in enumerate(texts):
            vector = self.embedding_of(str(text), self.embedding_dimension)
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(_tokens(str(t)) for t in texts)
        return 200, {
            "object": "list",
            "model": body.get("model", "test"),
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # hanging replies end
        self._httpd.shutdown()
        self._httpd.server_close()

    @staticmethod
    def _arguments_text(call: dict[str, Any]) -> str:
        arguments = call.get("arguments", {})
        return arguments if isinstance(arguments, str) else json.dumps(arguments)

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        prompt = _tokens(json.dumps(body.get("messages", [])))
        completion = (
            _tokens(
                (reply.content or "") + "".join(self._arguments_text(c) for c in reply.tool_calls)
            )
            if (reply.content or reply.tool_calls)
            else 0
        )
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        if reply.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        return usage

    def _tool_calls(self, reply: Reply) -> list[dict[str, Any]]:
        calls = []
        for call in reply.tool_calls:
            arguments = self._arguments_text(call)
            if reply.fault == "truncated_arguments":
                arguments = arguments[: len(arguments) // 2]
            calls.append(
                {
                    "id": call.get("id", f"call_{uuid.uuid4().hex[:8]}"),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": arguments},
                }
            )
        return calls

    @staticmethod
    def _finish_reason(reply: Reply) -> str:
        if reply.finish_reason is not None:
            return reply.finish_reason
        if reply.fault == "truncated_arguments":
            return "length"
        if reply.tool_calls and reply.dialect == "function_call":
            return "function_call"
        return "tool_calls" if reply.tool_calls else "stop"

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content: Any = reply.content
        if reply.dialect == "content_parts" and content:
            content = [{"type": "text", "text": part} for part in (content[:5], content[5:])]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.refusal is not None:
            message["refusal"] = reply.refusal
        if reply.tool_calls and reply.dialect == "function_call":
            (call,) = self._tool_calls(reply)
            message["function_call"] = call["function"]
        elif reply.tool_calls:
            message["tool_calls"] = self._tool_calls(reply)
            if reply.dialect == "arguments_object":
                for call in message["tool_calls"]:
                    call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "test-model"),
            "choices": [
                {
                    "index": None if reply.dialect == "index_null" else 0,
                    "message": message,
                    "finish_reason": self._finish_reason(reply),
                }
            ],
            **({"usage": self._usage(body, reply)} if reply.report_usage else {}),
            **({"error": None} if reply.dialect == "error_null" else {}),
        }

    def _chunks(self, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "test-model"),
        }

        if reply.dialect == "error_null":
            base["error"] = None
        choice_index = None if reply.dialect == "index_null" else 0

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": choice_index, "delta": delta, "finish_reason": finish}
            return {**base, "choices": [choice]}

        def piece(index: int, part: dict[str, Any]) -> dict[str, Any]:
            if reply.dialect == "no_index":
                return part
            return {"index": 0 if reply.dialect == "index_zero" else index, **part}

        chunks = [chunk({"role": "assistant", "content": ""})]
        thought = reply.reasoning or ""
        for start in range(0, len(thought), 7):
            chunks.append(chunk({"reasoning_content": thought[start : start + 7]}))
        if reply.refusal is not None:
            chunks.append(chunk({"content": None, "refusal": ""}))
            for start in range(0, len(reply.refusal), 7):
                chunks.append(chunk({"refusal": reply.refusal[start : start + 7]}))
        text = reply.content or ""
        for start in range(0, len(text), 7):
            chunks.append(chunk({"content": text[start : start + 7]}))
        for index, call in enumerate(self._tool_calls(reply)):
            if reply.dialect == "function_call":
                arguments = call["function"]["arguments"]
                named = {"name": call["function"]["name"], "arguments": ""}
                chunks.append(chunk({"function_call": named}))
                for start in range(0, len(arguments), 5):
                    piece_of = {"arguments": arguments[start : start + 5]}
                    chunks.append(chunk({"function_call": piece_of}))
                continue
            arguments = call["function"]["arguments"]
            first = {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            if reply.dialect == "arguments_object":
                first["function"]["arguments"] = json.loads(arguments)
                chunks.append(chunk({"tool_calls": [piece(index, first)]}))
                continue
            chunks.append(chunk({"tool_calls": [piece(index, first)]}))
            for start in range(0, len(arguments), 5):
                rest = {"function": {"arguments": arguments[start : start + 5]}}
                chunks.append(chunk({"tool_calls": [piece(index, rest)]}))
        chunks.append(chunk({}, self._finish_reason(reply)))
        if (body.get("stream_options") or {}).get("include_usage") and reply.report_usage:
            chunks.append({**base, "choices": [], "usage": self._usage(body, reply)})
        if reply.dialect == "content_parts":
            for one in chunks:
                for choice in one["choices"]:
                    text = choice["delta"].get("content")
                    if text:
                        choice["delta"]["content"] = [{"type": "text", "text": text}]
        return chunks
