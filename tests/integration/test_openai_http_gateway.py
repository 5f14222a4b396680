"""``OpenAIHttpGateway`` on what other OpenAI-compatible servers send.

The shared behaviour (both gateways) is in ``test_openai_protocol_gateways``; these are the
shapes of answer that vLLM, llama.cpp, Ollama and proxies produce beyond the loopback server's
script: a streamed request answered with one JSON body, an error event inside a stream, tool
calls whose chunks carry no index, keep-alive comments, a ``[DONE]`` with no finish reason.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from core_agent.contracts.errors import ModelError, ModelIncompleteError
from core_agent.contracts.llm_gateway import LLMRequest, LLMResponse, LLMTextDelta
from core_agent.contracts.settings import AgentSettings
from providers import litellm_price_table, openai_wire
from providers.openai_http_gateway import OpenAIHttpGateway
from shared.agent_protocol import UserMessage
from support.openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.anyio

ASK = LLMRequest(messages=[UserMessage(content="hi")])


class CannedServer:
    """Answers every POST with the same status, content type and raw body."""

    def __init__(self) -> None:
        self.status = 200
        self.content_type = "text/event-stream"
        self.body = b""
        self.requests: list[dict[str, Any]] = []
        self.held_open = False
        """Promise more body than is sent and keep the connection open (until closed)."""
        self.pause_s = 0.0
        """Wait this long between events (a slow model)."""
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(json.loads(self.rfile.read(length)))
                self.send_response(server.status)
                self.send_header("Content-Type", server.content_type)
                promised = len(server.body) + (64 if server.held_open else 0)
                self.send_header("Content-Length", str(promised))
                self.end_headers()
                for event in server.body.split(b"\n\n"):
                    if event:
                        self.wfile.write(event + b"\n\n")
                        self.wfile.flush()
                        time.sleep(server.pause_s)
                if server.held_open:
                    server._closing.wait()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def events(self, *lines: str) -> None:
        self.content_type = "text/event-stream"
        self.body = "".join(f"{line}\n\n" for line in lines).encode()

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def canned() -> Iterator[CannedServer]:
    server = CannedServer()
    yield server
    server.close()


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice], **extra})


async def streamed(gateway: OpenAIHttpGateway) -> tuple[list[str], LLMResponse]:
    items = [item async for item in gateway.stream(ASK)]
    final = items[-1]
    assert isinstance(final, LLMResponse)
    return [i.text for i in items if isinstance(i, LLMTextDelta)], final


async def test_a_streamed_request_answered_with_one_json_body_is_read(canned) -> None:
    canned.content_type = "application/json"
    canned.body = json.dumps(
        {
            "choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    ).encode()
    deltas, final = await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert deltas == ["whole"] and final.message.content == "whole"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 1)
    assert canned.requests[0]["stream"] is True


async def test_an_error_event_inside_a_stream_is_a_retryable_model_error(canned) -> None:
    canned.events(
        chunk({"content": "Par"}),
        'data: {"error": {"message": "the engine died", "code": 500}}',
    )
    gateway = OpenAIHttpGateway("openai/m", api_base=canned.base_url)
    with pytest.raises(ModelError, match="the engine died") as caught:
        await streamed(gateway)
    assert caught.value.retryable and caught.value.status_code == 500


@pytest.mark.parametrize(
    "data", ['{"message": "the engine died", "code": 500}', "the engine died"], ids=["json", "text"]
)
async def test_an_error_event_says_what_the_server_said(canned, data: str) -> None:
    # ``event: error`` whose data has no "error" member: it was taken for a cut stream.
    canned.events(chunk({"content": "Par"}), f"event: error\ndata: {data}")
    gateway = OpenAIHttpGateway("openai/m", api_base=canned.base_url)
    with pytest.raises(ModelError, match="the engine died") as caught:
        await streamed(gateway)
    assert caught.value.retryable


async def test_an_error_beside_choices_is_not_an_answer(canned) -> None:
    # OpenRouter reports an upstream failure mid-stream as a chunk with both an error and a
    # choice ended by ``finish_reason: error``: the text before it "succeeded".
    failed = {"message": "upstream provider overloaded", "code": 502}
    canned.events(
        chunk({"content": "The Great Wall is about"}),
        chunk({"content": ""}, "error", error=failed),
        "data: [DONE]",
    )
    gateway = OpenAIHttpGateway("openai/m", api_base=canned.base_url)
    with pytest.raises(ModelError, match="upstream provider overloaded") as caught:
        await streamed(gateway)
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("finish", "retryable"), [("error", True), ("sensitive", False), ("content_filter", False)]
)
async def test_an_answer_ended_by_an_error_or_a_filter_is_not_an_answer(
    canned, finish: str, retryable: bool
) -> None:
    # ``sensitive``: Zhipu GLM's filter, passed through by OpenAI-compatible servers.
    canned.events(chunk({"content": "The Great Wall is about"}), chunk({}, finish), "data: [DONE]")
    gateway = OpenAIHttpGateway("openai/m", api_base=canned.base_url)
    with pytest.raises(ModelError, match=f"finish_reason: {finish}") as caught:
        await streamed(gateway)
    assert caught.value.retryable is retryable


def piece(**part: Any) -> str:
    return chunk({"tool_calls": [part]})


@pytest.mark.parametrize(
    "pieces",
    [
        # A new id on every piece of one call, at one index (mlx and other servers).
        [
            piece(index=0, id="a1", function={"name": "calc", "arguments": ""}),
            piece(index=0, id="b2", function={"arguments": '{"x":'}),
            piece(index=0, id="c3", function={"arguments": " 1}"}),
        ],
        # No index and no id, the name repeated on every piece.
        [
            piece(function={"name": "calc", "arguments": '{"x":'}),
            piece(function={"name": "calc", "arguments": " 1}"}),
        ],
    ],
    ids=["new_id_every_piece", "name_every_piece"],
)
async def test_the_pieces_of_one_call_stay_one_call(canned, pieces: list[str]) -> None:
    canned.events(*pieces, chunk({}, "tool_calls"), "data: [DONE]")
    _, final = await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    (call,) = final.message.tool_calls
    assert (call.name, call.arguments) == ("calc", {"x": 1})


async def test_a_finish_reason_before_the_end_does_not_cut_a_slow_answer(
    canned, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some servers put the finish reason on every chunk: only a finish that ends the answer
    # (nothing else in its chunk, or usage after it) lets a pause cut the rest short.
    monkeypatch.setattr(openai_wire, "AFTER_FINISH_S", 0.1)
    canned.pause_s = 0.3
    canned.events(
        chunk({"content": "北京"}, "stop"),
        chunk({"content": "是首都。"}, "stop"),
        "data: [DONE]",
    )
    deltas, final = await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert final.message.content == "北京是首都。" and deltas == ["北京", "是首都。"]


async def test_tool_call_chunks_without_an_index_are_reassembled(canned) -> None:
    canned.events(
        ": keep-alive",
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "calc", "arguments": '{"x"'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": ": 1}"}}]}),
        chunk({"tool_calls": [{"id": "c2", "function": {"name": "calc", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    _, final = await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert [(c.id, c.name, c.arguments) for c in final.message.tool_calls] == [
        ("c1", "calc", {"x": 1}),
        ("c2", "calc", {}),
    ]
    assert final.finish_reason == "tool_calls"


async def test_done_without_a_finish_reason_is_a_whole_answer(canned) -> None:
    # [DONE] is the protocol's end of stream: the answer is whole though no reason was given.
    canned.events(chunk({"content": "a"}), chunk({"content": "b"}), "data: [DONE]")
    deltas, final = await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert deltas == ["a", "b"] and final.message.content == "ab"


async def test_a_stream_with_neither_finish_reason_nor_done_is_cut(canned) -> None:
    canned.events(chunk({"content": "The answ"}))
    with pytest.raises(ModelIncompleteError, match="cut off") as caught:
        await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert caught.value.retryable


async def test_a_chunk_that_is_not_json_is_a_retryable_error(canned) -> None:
    canned.events(chunk({"content": "a"}), "data: {not json")
    with pytest.raises(ModelIncompleteError, match="not JSON") as caught:
        await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert caught.value.retryable


async def test_the_cost_of_a_listed_model_comes_from_litellms_table(canned) -> None:
    canned.events(
        chunk({"content": "hi"}, "stop"),
        'data: {"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}',
        "data: [DONE]",
    )
    _, final = await streamed(OpenAIHttpGateway("openai/gpt-4o-mini", api_base=canned.base_url))
    expected = litellm_price_table.cost_usd("openai/gpt-4o-mini", 1000, 100)
    assert expected is not None and expected > 0
    assert final.usage.cost_usd == pytest.approx(expected)
    assert canned.requests[0]["model"] == "gpt-4o-mini"  # the server's name, prefix removed


def test_the_gateway_follows_the_model_unless_one_is_named(tmp_path) -> None:
    def name(**values: Any) -> str:
        return AgentSettings(data_dir=tmp_path, **values).gateway_name

    local = "http://127.0.0.1:8080/v1"
    assert name(model="openai/qwen", model_api_base=local) == "openai_http"
    assert name(model="qwen", model_provider="openai", model_api_base=local) == "openai_http"
    assert name(model="openai/gpt-4o-mini") == "litellm"  # no base URL: OpenAI through litellm
    assert name(model="ollama/llama3.2", model_api_base=local) == "litellm"
    assert name(model="openai/qwen", model_api_base=local, llm_gateway="litellm") == "litellm"
    assert name() == "scripted"


async def test_a_kernel_keeps_its_connection_to_the_server_across_calls(tmp_path) -> None:
    # Against a remote https server each new connection is a TCP and a TLS handshake: the
    # kernel's calls share one while it is entered, and close it when it closes.
    from core_agent import create_kernel
    from shared.agent_protocol import TaskRequest, TaskStatus
    from support.openai_server import OpenAIServer

    with OpenAIServer(chunked=True) as server:
        calculate = {"name": "calculator", "arguments": {"expression": "6 * 7"}}
        server.reply(tool_calls=[calculate])
        server.reply(tool_calls=[calculate])
        server.reply("四十二")
        settings = AgentSettings(
            data_dir=tmp_path / "data",
            model="openai/local-model",
            model_api_base=server.base_url,
            llm_gateway="openai_http",
            model_max_retries=0,
        )
        async with create_kernel(settings) as kernel:
            result = await kernel.execute_task(TaskRequest(task="算一下", force_mode="react"))
        assert result.status is TaskStatus.SUCCEEDED, result.error
        assert len(server.requests) == 3
        assert server.connections == 1


async def test_calls_outside_a_connections_scope_close_what_they_open() -> None:
    # Used on its own (no kernel), the gateway leaves no socket behind: the suite turns an
    # unclosed one into an error.
    from support.openai_server import OpenAIServer

    with OpenAIServer(chunked=True) as server:
        gateway = OpenAIHttpGateway("openai/local-model", api_base=server.base_url)
        for text in ("一", "二"):
            server.reply(text)
            response = await gateway.complete(LLMRequest(messages=[UserMessage(content="hi")]))
            assert response.message.content == text
        assert server.connections == 2
        async with gateway.connections():
            for text in ("三", "四"):
                server.reply(text)
                items = [
                    item
                    async for item in gateway.stream(
                        LLMRequest(messages=[UserMessage(content="hi")])
                    )
                ]
                assert isinstance(items[-1], LLMResponse) and items[-1].message.content == text
        assert server.connections == 3


async def test_a_body_left_open_after_done_is_not_waited_for(canned) -> None:
    # The answer is whole at [DONE]: a server that keeps the body open after it costs the
    # call a moment, not the read timeout (the connection is then not kept).
    import anyio

    canned.events(chunk({"content": "完整的回答"}, "stop"), "data: [DONE]")
    canned.held_open = True
    gateway = OpenAIHttpGateway("openai/m", api_base=canned.base_url, timeout_s=60)
    with anyio.fail_after(30):  # a guard against a hang, far below the 60 s timeout
        async with gateway.connections():
            texts, final = await streamed(gateway)
    assert "".join(texts) == "完整的回答" and final.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_member_the_server_refuses_is_left_out_from_then_on(
    openai_server: OpenAIServer, stream: bool
) -> None:
    # Azure's and OpenAI's wordings: the call still succeeds, sent again without what was
    # refused, and the gateway does not ask again.
    openai_server.refused_parameters = {
        "stream_options": "Unrecognized request argument supplied: stream_options",
        "max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
    }
    gateway = OpenAIHttpGateway("openai/m", api_base=openai_server.base_url)
    ask = LLMRequest(messages=[UserMessage(content="q")], max_tokens=64)
    for answer in ("一", "二"):
        openai_server.reply(answer)
        if stream:
            items = [item async for item in gateway.stream(ask)]
            final = items[-1]
        else:
            final = await gateway.complete(ask)
        assert isinstance(final, LLMResponse) and final.message.content == answer

    assert all(
        "max_tokens" not in r and r["max_completion_tokens"] == 64 for r in openai_server.requests
    )
    assert all("stream_options" not in r for r in openai_server.requests)
    assert len(openai_server.refusals) == (2 if stream else 1)  # each member refused once


async def test_a_refusal_naming_nothing_it_can_leave_out_is_an_error(
    openai_server: OpenAIServer,
) -> None:
    openai_server.reply(status=400, error_message="messages: must not be empty")
    gateway = OpenAIHttpGateway("openai/m", api_base=openai_server.base_url)
    with pytest.raises(ModelError, match="must not be empty"):
        await gateway.complete(ASK)
    assert len(openai_server.requests) == 1


async def test_calls_refused_at_the_same_time_are_all_sent_again(
    openai_server: OpenAIServer,
) -> None:
    # The first refusal teaches the gateway; the others, of requests already sent, must not
    # then read as refusals of something else.
    openai_server.refused_parameters = {
        "stream_options": "Unrecognized request argument supplied: stream_options"
    }
    openai_server.responder = lambda body: Reply("好")
    gateway = OpenAIHttpGateway("openai/m", api_base=openai_server.base_url)
    answers: list[str | None] = []

    async def ask() -> None:
        items = [item async for item in gateway.stream(ASK)]
        final = items[-1]
        assert isinstance(final, LLMResponse)
        answers.append(final.message.content)

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(ask)

    assert answers == ["好"] * 4
    assert len(openai_server.refusals) > 1  # they were refused together


@pytest.mark.parametrize(
    "message",
    [
        # vLLM's prompt-too-long refusal names both, refusing neither.
        "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum "
        "context length is 2048 tokens and your request has 300 input tokens",
        "stream_options.include_usage must be boolean",
    ],
)
async def test_an_error_that_only_mentions_a_member_changes_nothing(
    openai_server: OpenAIServer, message: str
) -> None:
    openai_server.reply(status=400, error_message=message)
    openai_server.reply("好")
    gateway = OpenAIHttpGateway("openai/m", api_base=openai_server.base_url)
    ask = LLMRequest(messages=[UserMessage(content="q")], max_tokens=64)
    with pytest.raises(ModelError):
        [item async for item in gateway.stream(ask)]
    [item async for item in gateway.stream(ask)]

    first, second = openai_server.requests
    assert first.keys() == second.keys()  # sent once each, as asked
    assert second["max_tokens"] == 64 and "stream_options" in second


async def test_a_422_echoing_the_request_is_not_a_refusal_of_its_members(canned) -> None:
    canned.status = 422
    canned.content_type = "application/json"
    canned.body = json.dumps(
        {
            "detail": [
                {
                    "type": "missing",
                    "loc": ["body", "messages"],
                    "msg": "Field required",
                    "input": {"model": "m", "stream_options": {"include_usage": True}},
                }
            ]
        }
    ).encode()
    gateway = OpenAIHttpGateway("openai/m", api_base=canned.base_url)
    with pytest.raises(ModelError):
        await streamed(gateway)
    assert len(canned.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(
    ("status", "location", "body", "advice"),
    [
        (
            307,
            "https://models.example/v1/chat/completions",
            "",
            "set AGENT_MODEL_API_BASE to https://models.example/v1",
        ),
        (301, "/login?next=/v1", "<html><body>Moved</body></html>", "check AGENT_MODEL_API_BASE"),
    ],
)
async def test_a_redirect_is_a_configuration_mistake_named_at_once(
    openai_server, stream, status, location, body, advice
) -> None:
    # Every status below 400 was taken for an answer: "empty body" or "not JSON", retried.
    openai_server.reply(status=status, location=location, error_message=body)
    gateway = OpenAIHttpGateway("openai/m", api_base=openai_server.base_url)
    with pytest.raises(ModelError) as caught:
        await (streamed(gateway) if stream else gateway.complete(ASK))
    target = location if location.startswith("https:") else openai_server.base_url[:-3] + location
    assert str(caught.value) == (
        f"model call failed: HTTP {status}: the server redirects to {target}; {advice}"
    )
    assert caught.value.status_code == status and not caught.value.retryable
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_redirect_to_an_unreadable_url_is_named_at_once_too(openai_server, stream) -> None:
    # httpx raises it as a protocol error before the redirect is seen: it was retried 3 times.
    openai_server.reply(status=307, location="http://[::1/v1/chat/completions")
    gateway = OpenAIHttpGateway("openai/m", api_base=openai_server.base_url)
    with pytest.raises(ModelError) as caught:
        await (streamed(gateway) if stream else gateway.complete(ASK))
    assert "redirects to a URL that cannot be read" in str(caught.value)
    assert not caught.value.retryable and len(openai_server.requests) == 1


async def test_a_stream_opening_with_a_byte_order_mark_loses_no_event(canned) -> None:
    # The mark made the first line's field name "\ufeffdata": the first piece of text was lost.
    canned.events(chunk({"content": "Hello"}), chunk({"content": " world"}, "stop"), "data: [DONE]")
    canned.body = "\ufeff".encode() + canned.body
    deltas, final = await streamed(OpenAIHttpGateway("openai/m", api_base=canned.base_url))
    assert final.message.content == "Hello world" and deltas == ["Hello", " world"]
