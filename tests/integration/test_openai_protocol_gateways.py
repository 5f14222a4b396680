"""Both gateways that speak the OpenAI protocol, against a real loopback server.

``LiteLLMGateway`` (litellm's real client code) and ``OpenAIHttpGateway`` (httpx) owe the kernel
the same verdicts, so every behaviour here is checked on both.
"""

import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from core_agent.cli import main
from core_agent.contracts.errors import (
    ConfigurationError,
    ModelAuthenticationError,
    ModelContextWindowError,
    ModelError,
    ModelIncompleteError,
    ModelRateLimitError,
    ModelTimeoutError,
)
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
    ToolDefinition,
)
from core_agent.contracts.settings import AgentSettings
from providers.litellm_gateway import LiteLLMGateway
from providers.openai_http_gateway import OpenAIHttpGateway
from providers.openai_wire import retry_after_seconds
from shared.agent_protocol import AssistantMessage, ToolCall, ToolMessage, UserMessage
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

CALC = ToolDefinition(
    "calculator",
    "Evaluate arithmetic.",
    {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)


Make = Callable[..., ILLMGateway]


@pytest.fixture(params=[LiteLLMGateway, OpenAIHttpGateway], ids=["litellm", "openai_http"])
def make(request: pytest.FixtureRequest) -> Make:
    """Builds the gateway under test: ``make(model, api_base=..., api_key=..., timeout_s=...)``."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def gateway(make: Make, litellm_settings: AgentSettings) -> ILLMGateway:
    settings = litellm_settings
    return make(
        settings.model,
        api_base=settings.model_api_base,
        api_key="sk-test",
        timeout_s=settings.model_timeout_s,
    )


async def test_plain_completion_reports_text_and_tokens(gateway, openai_server) -> None:
    openai_server.reply("Paris is the capital.")
    response = await gateway.complete(LLMRequest(messages=[UserMessage(content="Capital?")]))
    assert response.message.content == "Paris is the capital."
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert openai_server.requests[0]["model"] == "test-model"
    assert openai_server.requests[0]["messages"] == [{"role": "user", "content": "Capital?"}]


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_cache_and_reasoning_tokens_come_through_where_the_server_reports_them(
    make, litellm_settings, openai_server, streamed
) -> None:
    gateway = make(
        "openai/gpt-4o-mini",
        api_base=litellm_settings.model_api_base,
        api_key="sk-test",
        timeout_s=litellm_settings.model_timeout_s,
    )

    async def answer() -> LLMResponse:
        request = LLMRequest(messages=[UserMessage(content="Capital?")])
        if not streamed:
            return await gateway.complete(request)
        items = [item async for item in gateway.stream(request)]
        assert isinstance(items[-1], LLMResponse)
        return items[-1]

    openai_server.reply("Paris.", cached_tokens=3, reasoning_tokens=2)
    openai_server.reply("Paris.")
    reported, silent = await answer(), await answer()
    assert (reported.usage.cache_read_tokens, reported.usage.reasoning_tokens) == (3, 2)
    assert silent.usage.cache_read_tokens is None
    # litellm's stream assembly counts reasoning tokens itself (0 when there were none).
    assert silent.usage.reasoning_tokens in (None, 0)
    # The same tokens, but three of them read from the cache at its lower price.
    assert reported.usage.input_tokens == silent.usage.input_tokens
    assert silent.usage.cost_usd is not None and reported.usage.cost_usd is not None
    assert reported.usage.cost_usd < silent.usage.cost_usd


async def test_streamed_tool_calls_are_reassembled(gateway, openai_server) -> None:
    openai_server.reply(
        "Let me compute.",
        tool_calls=[
            {"id": "call_a", "name": "calculator", "arguments": {"expression": "6 * 7"}},
            {"id": "call_b", "name": "calculator", "arguments": {"expression": "1 + 1"}},
        ],
    )
    items = [
        item
        async for item in gateway.stream(
            LLMRequest(messages=[UserMessage(content="compute")], tools=[CALC])
        )
    ]
    deltas = [i.text for i in items if isinstance(i, LLMTextDelta)]
    final = items[-1]
    assert isinstance(final, LLMResponse)
    assert len(deltas) > 1 and "".join(deltas) == "Let me compute."
    assert [(c.id, c.name, c.arguments) for c in final.message.tool_calls] == [
        ("call_a", "calculator", {"expression": "6 * 7"}),
        ("call_b", "calculator", {"expression": "1 + 1"}),
    ]
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    sent = openai_server.requests[0]
    assert sent["stream"] is True and sent["tools"][0]["function"]["name"] == "calculator"


TWO_CALLS = [
    {"id": "call_a", "name": "calculator", "arguments": {"expression": "2 + 3"}},
    {"id": "call_b", "name": "calculator", "arguments": {"expression": "4 * 5"}},
]


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(
    "dialect",
    ["index_zero", "no_index", "arguments_object", "error_null", "index_null", "latin1_events"],
)
async def test_tool_calls_in_other_servers_shapes_come_through_whole(
    gateway, openai_server, dialect, stream
) -> None:
    # Valid answers as servers other than OpenAI's shape them: each call whole, none merged
    # with another (every parallel call numbered 0, as Ollama does, made one call of both
    # argument strings), none left empty.
    openai_server.reply("算一下。", tool_calls=TWO_CALLS, dialect=dialect)
    request = LLMRequest(messages=[UserMessage(content="2+3 和 4*5")], tools=[CALC])
    with warnings.catch_warnings():
        # The openai client under litellm warns about arguments given as an object (it
        # passes them on whole), and this suite makes warnings errors.
        warnings.simplefilter("ignore")
        response = await consume(gateway, stream, request)
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
        ("call_a", "calculator", {"expression": "2 + 3"}),
        ("call_b", "calculator", {"expression": "4 * 5"}),
    ]
    assert response.message.content == "算一下。"


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(
    ("make", "dialect"),
    [
        (OpenAIHttpGateway, "content_parts"),
        (OpenAIHttpGateway, "plain_text_events"),
        (OpenAIHttpGateway, "latin1_events"),
        (LiteLLMGateway, "latin1_events"),
    ],
    ids=["openai_http-parts", "openai_http-text_plain", "openai_http-latin1", "litellm-latin1"],
)
async def test_text_in_other_servers_shapes_comes_through(
    make, litellm_settings, openai_server, dialect, stream
) -> None:
    # Content as a list of parts and an event stream labelled text/plain are read by the
    # HTTP gateway (they crashed it, or failed as "not JSON"); litellm parses those itself.
    gateway = make(litellm_settings.model, api_base=litellm_settings.model_api_base, api_key="x")
    openai_server.reply("北京是中国的首都。", dialect=dialect)
    response = await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="首都？")]))
    assert response.message.content == "北京是中国的首都。"


async def test_an_answer_whose_server_stalls_after_finishing_is_taken(
    make, litellm_settings, openai_server
) -> None:
    # Finish reason and usage sent, then nothing: the answer is whole. It was thrown away at
    # the call's timeout (here 30 s), and the whole generation asked for again.
    gateway = make(
        litellm_settings.model,
        api_base=litellm_settings.model_api_base,
        api_key="x",
        timeout_s=30,
    )
    openai_server.reply("完整的回答。", fault="stall_after_finish")
    response = await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
    assert response.message.content == "完整的回答。" and response.finish_reason == "stop"
    assert len(openai_server.requests) == 1


async def test_malformed_tool_arguments_are_kept_raw(gateway, openai_server) -> None:
    openai_server.reply(None, tool_calls=[{"name": "calculator", "arguments": '{"expression": '}])
    response = await gateway.complete(LLMRequest(messages=[UserMessage(content="x")], tools=[CALC]))
    (call,) = response.message.tool_calls
    assert call.arguments is None and call.raw_arguments == '{"expression": '


async def test_tool_results_are_sent_back_in_wire_format(gateway, openai_server) -> None:
    openai_server.reply("42")
    call = ToolCall(id="call_1", name="calculator", arguments={"expression": "6*7"})
    await gateway.complete(
        LLMRequest(
            messages=[
                UserMessage(content="q"),
                AssistantMessage(content=None, tool_calls=(call,)),
                ToolMessage(tool_call_id="call_1", name="calculator", content="42"),
            ]
        )
    )
    sent = openai_server.requests[0]["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression": "6*7"}',
    }
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (500, ModelError),
        (401, ModelAuthenticationError),
        (429, ModelRateLimitError),
        (400, ModelError),
    ],
)
async def test_provider_errors_map_to_the_kernel_error_tree(
    gateway, openai_server, status, error_type
) -> None:
    openai_server.reply(status=status, error_message="server says no")
    with pytest.raises(error_type) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.status_code == status
    assert "server says no" in str(caught.value)
    assert type(caught.value).__module__.startswith("core_agent")


async def test_stream_errors_are_mapped_too(gateway, openai_server) -> None:
    openai_server.reply(status=503, error_message="overloaded")
    with pytest.raises(ModelError) as caught:
        async for _ in gateway.stream(LLMRequest(messages=[UserMessage(content="x")])):
            pass
    assert caught.value.status_code == 503 and caught.value.retryable


async def test_an_unreachable_server_is_a_retryable_model_error(make: Make) -> None:
    gateway = make(
        "openai/test-model",
        api_base="http://127.0.0.1:9/v1",
        api_key="x",
        timeout_s=5,
    )
    with pytest.raises(ModelError) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retryable


def test_the_context_window_comes_from_litellms_bundled_table(make: Make) -> None:
    # Read offline (LITELLM_LOCAL_MODEL_COST_MAP); a self-hosted model is simply unknown.
    base = "http://127.0.0.1:9/v1"
    assert make("openai/gpt-4o-mini", api_base=base).context_window() == 128_000
    assert make("openai/some-self-hosted-model", api_base=base).context_window() is None


# Faults, injected by the loopback server. litellm's own retries are off: one call, one request.

TEXT = "The answer is forty-two, and here is why it is so."


async def consume(gateway: ILLMGateway, stream: bool, request: LLMRequest) -> LLMResponse:
    if not stream:
        return await gateway.complete(request)
    items = [item async for item in gateway.stream(request)]
    assert isinstance(items[-1], LLMResponse)
    return items[-1]


@pytest.mark.parametrize("chunked", [False, True], ids=["connection-delimited", "chunked"])
@pytest.mark.parametrize("fault", ["cut", "reset"])
async def test_a_stream_cut_before_its_finish_reason_is_a_retryable_error(
    make: Make, chunked: bool, fault: Any
) -> None:
    with OpenAIServer(chunked=chunked) as server:
        gateway = make("openai/test-model", api_base=server.base_url, api_key="x")
        server.reply(TEXT, fault=fault)
        with pytest.raises(ModelError) as caught:
            await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
        assert caught.value.retryable
        assert len(server.requests) == 1
        # The same stream, whole, is accepted.
        server.reply(TEXT)
        response = await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
        assert response.message.content == TEXT and response.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_body_is_a_retryable_error(gateway, openai_server, stream) -> None:
    openai_server.reply("unused", fault="empty")
    with pytest.raises(ModelError) as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retryable and len(openai_server.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_with_no_text_and_no_tool_call_is_incomplete(
    gateway, openai_server, stream
) -> None:
    openai_server.reply("")
    with pytest.raises(ModelIncompleteError, match="empty answer") as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retryable


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("reason", ["error", "network_error", "abort"])
async def test_an_answer_the_provider_ended_with_an_error_is_a_retryable_error(
    gateway, openai_server, stream, reason
) -> None:
    # OpenRouter's mid-stream failure, Zhipu GLM's, vLLM's and SGLang's aborted request: the
    # text before it is part of an answer, not one. litellm maps reasons it does not know
    # (and Zhipu's) to "stop", which must not pass for a finished answer.
    # (litellm fails a stream that ends with "error" itself, with an error of its own.)
    openai_server.reply("The answer is", finish_reason=reason)
    with pytest.raises(ModelError, match=f"finish_reason: {reason}") as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_arguments_cut_by_the_token_limit_are_incomplete(
    gateway, openai_server, stream
) -> None:
    openai_server.reply(
        None,
        tool_calls=[{"name": "calculator", "arguments": {"expression": "6 * 7 + 1"}}],
        fault="truncated_arguments",
    )
    request = LLMRequest(messages=[UserMessage(content="x")], tools=[CALC])
    with pytest.raises(ModelIncompleteError, match="cut off by the token limit") as caught:
        await consume(gateway, stream, request)
    assert caught.value.retryable


@pytest.mark.parametrize(("header", "seconds"), [("7", 7.0), ("0.5", 0.5)])
async def test_retry_after_is_passed_on(gateway, openai_server, header, seconds) -> None:
    openai_server.reply(status=429, error_message="slow down", retry_after=header)
    with pytest.raises(ModelRateLimitError) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retry_after_s == seconds and caught.value.retryable
    assert len(openai_server.requests) == 1


def test_retry_after_may_be_an_http_date() -> None:
    assert (
        retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:30 GMT"}, now=1445412500.0)
        == 10.0
    )
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({"Retry-After": "nan"}) is None
    assert retry_after_seconds({"retry-after-ms": "NaN", "Retry-After": "2"}) == 2.0
    assert retry_after_seconds(None) is None


async def test_one_failing_call_sends_one_request(gateway, openai_server) -> None:
    openai_server.reply(status=503, error_message="overloaded")
    openai_server.reply("a reply litellm's own retry would have taken")
    with pytest.raises(ModelError):
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert len(openai_server.requests) == 1


async def test_a_prompt_too_long_for_the_model_is_a_typed_error(gateway, openai_server) -> None:
    openai_server.reply(
        status=400,
        error_message="This model's maximum context length is 8192 tokens. However, your "
        "messages resulted in 9000 tokens.",
    )
    with pytest.raises(ModelContextWindowError) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert not caught.value.retryable and caught.value.status_code == 400


PROMPT_TOO_LONG = {
    "llama.cpp": (
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
            }
        },
    ),
    "vllm": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "type": "BadRequestError",
            "code": 400,
        },
    ),
    "vllm_v1": (
        400,
        {
            "object": "error",
            "message": "The decoder prompt (length 5000) is longer than the maximum model "
            "length of 4096. Make sure that `max_model_len` is no smaller than the number of "
            "text tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
    ),
    "ollama": (
        400,
        {"error": {"message": "prompt too long; exceeded max context length by 904 tokens"}},
    ),
    "lm_studio": (
        400,
        {
            "error": "Trying to keep the first 6347 tokens when context the overflows. However, "
            "the model is loaded with context length of only 4096 tokens, which is not enough."
        },
    ),
    "openrouter": (
        400,
        {
            "error": {
                "message": "This endpoint's maximum context length is 8192 tokens. However, you "
                "requested about 9013 tokens (8013 of text input, 1000 in the output).",
                "code": 400,
            }
        },
    ),
    "tgi": (
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
            "4096. Given: 4000 `inputs` tokens and 1000 `max_new_tokens`",
            "error_type": "validation",
        },
    ),
    "tgi_inputs": (
        422,
        {
            "error": "Input validation error: `inputs` must have less than 4096 tokens. "
            "Given: 5000",
            "error_type": "validation",
        },
    ),
    "proxy_413": (413, {"error": {"message": "prompt is too long: 210000 tokens > 200000"}}),
}


@pytest.mark.parametrize("server", sorted(PROMPT_TOO_LONG))
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_every_servers_wording_of_a_prompt_too_long_is_the_typed_error(
    gateway, openai_server, server, streamed
) -> None:
    # Both gateways judge by one list: a wording one of them missed failed the task at once
    # through it, while the other trimmed the prompt and asked again.
    status, body = PROMPT_TOO_LONG[server]
    openai_server.reply(status=status, error_body=body)
    request = LLMRequest(messages=[UserMessage(content="x")])

    async def ask() -> None:
        if streamed:
            _ = [item async for item in gateway.stream(request)]
        else:
            await gateway.complete(request)

    with pytest.raises(ModelContextWindowError) as caught:
        await ask()
    assert not caught.value.retryable and caught.value.status_code == status


@pytest.mark.parametrize("status", [429, 500])
async def test_window_words_in_an_error_that_is_no_refusal_are_not_a_prompt_too_long(
    gateway, openai_server, status
) -> None:
    openai_server.reply(status=status, error_message="too many tokens; context window busy")
    with pytest.raises(ModelError) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert not isinstance(caught.value, ModelContextWindowError) and caught.value.retryable


async def test_a_hanging_server_is_a_retryable_timeout(make: Make, openai_server) -> None:
    gateway = make("openai/test-model", api_base=openai_server.base_url, api_key="x", timeout_s=0.5)
    openai_server.reply(fault="hang")
    with pytest.raises(ModelTimeoutError) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retryable


async def test_a_server_refusing_stream_options_is_streamed_without_them(
    gateway, openai_server
) -> None:
    openai_server.refused_parameters = {
        "stream_options": "Unrecognized request argument supplied: stream_options"
    }
    for answer in ("一", "二"):
        openai_server.reply(answer)
        ask = LLMRequest(messages=[UserMessage(content="首都？")])
        items = [item async for item in gateway.stream(ask)]
        assert items[-1].message.content == answer
    assert len(openai_server.refusals) == 1  # refused once, then never asked again
    assert all("stream_options" not in r for r in openai_server.requests)


BAD_API_BASES = [
    ("http://localhost:80800/v1", "Port out of range"),
    ("http://[::1", "Invalid IPv6 URL"),
    ("not-a-url", "must be an http:// or https:// URL"),
]


@pytest.mark.parametrize(("api_base", "why"), BAD_API_BASES)
def test_a_malformed_api_base_is_refused_when_the_gateway_is_built(
    make: Make, tmp_path, api_base: str, why: str
) -> None:
    # It was found only by the first call: the HTTP gateway let httpx's InvalidURL (or an
    # ExceptionGroup around the socket's OverflowError) out, the task failed as "unhandled
    # errors in a TaskGroup"; litellm reported a retryable "Connection error", tried 3 times.
    settings = AgentSettings(data_dir=tmp_path, model="openai/test-model", model_api_base=api_base)
    with pytest.raises(ConfigurationError) as caught:
        make.from_settings(settings)
    assert str(caught.value).startswith("AGENT_MODEL_API_BASE must be an http:// or https://")
    assert repr(api_base) in str(caught.value) and why in str(caught.value)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(("api_base", "why"), BAD_API_BASES)
async def test_a_malformed_api_base_given_directly_fails_as_a_model_error(
    api_base: str, why: str, stream: bool
) -> None:
    gateway = OpenAIHttpGateway("openai/test-model", api_base=api_base, api_key="x")
    with pytest.raises(ModelError, match="cannot be requested") as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    assert not caught.value.retryable and type(caught.value) is ModelError
    assert "AGENT_MODEL_API_BASE" in str(caught.value)


def test_run_with_a_malformed_api_base_stops_before_any_task(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("AGENT_MODEL", "openai/test-model")
    monkeypatch.setenv("AGENT_MODEL_API_BASE", "http://localhost:80800/v1")
    assert main(["run", "2+3?", "--mode", "react"]) == 2
    err = capsys.readouterr().err
    assert "AGENT_MODEL_API_BASE" in err and "http://localhost:80800/v1" in err
    assert "internal error" not in err
    monkeypatch.delenv("AGENT_MODEL_API_BASE")
    assert main(["tasks", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


REFUSAL = "I'm sorry, I can't assist with that request."


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_refusal_fails_at_once_and_quotes_it(gateway, openai_server, stream) -> None:
    # OpenAI's `refusal` (content null) was ignored: "the model returned an empty answer",
    # retried 3 times, the model's words nowhere. The same request would be refused again.
    openai_server.reply(None, refusal=REFUSAL)
    with pytest.raises(ModelIncompleteError) as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    assert str(caught.value) == f"the model refused to answer: {REFUSAL!r}"
    assert caught.value.body == REFUSAL and not caught.value.retryable
    assert caught.value.usage is not None and caught.value.usage.input_tokens > 0


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_call_in_the_deprecated_function_call_form_is_one_tool_call(
    gateway, openai_server, stream
) -> None:
    # `function_call` (the `functions` API's one call, no id) was read as an empty answer.
    openai_server.reply(
        None,
        tool_calls=[{"name": "calculator", "arguments": {"expression": "2 + 2"}}],
        dialect="function_call",
    )
    request = LLMRequest(messages=[UserMessage(content="2+2")], tools=[CALC])
    response = await consume(gateway, stream, request)
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
        ("call_1", "calculator", {"expression": "2 + 2"})
    ]
    assert response.finish_reason == "function_call"


NOT_PULLED = "model 'x' not found, try pulling it first"


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_an_error_body_with_status_200_says_what_the_server_said(
    gateway, openai_server, stream
) -> None:
    # Ollama's answer for a model it does not have. Streamed through litellm it was "the
    # stream ended before the provider said it was finished", and both gateways retried it.
    openai_server.reply(fault="error_200", error_message=NOT_PULLED)
    with pytest.raises(ModelError) as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    assert NOT_PULLED in str(caught.value) and caught.value.status_code == 404
    assert not caught.value.retryable and len(openai_server.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_web_page_for_an_answer_says_to_check_the_base_url(
    gateway, openai_server, stream
) -> None:
    # A base URL pointing at LM Studio's web interface, or a proxy's login page. Through
    # litellm it was a cut answer (streamed) or a server error (whole), tried three times
    # and counted against the circuit breaker; asking again gets the same page.
    page = "<!DOCTYPE html><html><head><title>Sign in</title></head><body>LM Studio</body></html>"
    openai_server.reply(fault="web_page", error_message=page)
    with pytest.raises(ModelError) as caught:
        await consume(gateway, stream, LLMRequest(messages=[UserMessage(content="x")]))
    message = str(caught.value)
    assert "web page" in message and "AGENT_MODEL_API_BASE" in message
    assert openai_server.base_url in message and "<!DOCTYPE html>" in (caught.value.body or "")
    assert not caught.value.retryable and len(openai_server.requests) == 1


async def test_an_error_body_labelled_as_an_event_stream_is_read_as_the_error(
    litellm_settings, openai_server
) -> None:
    # No `data:` line: the HTTP gateway found no event and said "ended without any chunk".
    # (litellm's client reads it as an empty stream too: its text is not kept to be read.)
    gateway = OpenAIHttpGateway("openai/m", api_base=litellm_settings.model_api_base)
    openai_server.reply(fault="error_200_events", error_message=NOT_PULLED)
    with pytest.raises(ModelError) as caught:
        await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
    assert str(caught.value) == f"model call failed: {NOT_PULLED}"
    assert caught.value.status_code == 404 and not caught.value.retryable


async def test_a_long_error_body_labelled_as_an_event_stream_is_read_whole(
    litellm_settings, openai_server
) -> None:
    # Past 4,000 characters the body was cut before it was parsed: "a chunk that is not
    # JSON", retried, its status lost.
    gateway = OpenAIHttpGateway("openai/m", api_base=litellm_settings.model_api_base)
    openai_server.reply(fault="error_200_events", error_message=NOT_PULLED + " y" * 2500)
    with pytest.raises(ModelError) as caught:
        await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
    assert NOT_PULLED in str(caught.value)
    assert caught.value.status_code == 404 and not caught.value.retryable


async def test_a_whole_completion_labelled_as_an_event_stream_is_the_answer(
    litellm_settings, openai_server
) -> None:
    # A server that ignores "stream": true and labels its whole answer as a stream: the
    # answer was read as no event, "an empty answer", and retried.
    gateway = OpenAIHttpGateway("openai/m", api_base=litellm_settings.model_api_base)
    openai_server.reply("答案是 42。", fault="whole_as_events")
    response = await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
    assert response.message.content == "答案是 42。" and response.finish_reason == "stop"


async def test_an_error_event_in_an_accepted_stream_is_retryable(gateway, openai_server) -> None:
    # vLLM and SGLang put code 400 on any failure while generating: the request was accepted
    # (200) and may well succeed again; the HTTP gateway took the code for the request's
    # status and gave up.
    openai_server.reply("一段会被打断的回答，后面还有很多字。", fault="error_mid_stream")
    with pytest.raises(ModelError) as caught:
        await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
    assert "Background loop has errored already." in str(caught.value)
    assert caught.value.retryable


@pytest.mark.parametrize("fault", ["cut", "stall_after_finish"])
async def test_litellm_judges_a_stream_labelled_text_plain_as_a_stream(
    litellm_settings, openai_server, fault
) -> None:
    # The check for an error body read every body not labelled an event stream whole, before
    # litellm: a cut became a non-retryable read error, a stall after the finish reason a
    # timeout instead of the answer.
    gateway = LiteLLMGateway(
        litellm_settings.model, api_base=litellm_settings.model_api_base, timeout_s=30
    )
    openai_server.reply("完整的回答，分成很多块发出来。", dialect="plain_text_events", fault=fault)
    request = LLMRequest(messages=[UserMessage(content="x")])
    if fault == "cut":
        with pytest.raises(ModelError) as caught:
            await consume(gateway, True, request)
        assert caught.value.retryable
    else:
        response = await consume(gateway, True, request)
        assert response.message.content == "完整的回答，分成很多块发出来。"


@pytest.mark.parametrize("chunked", [False, True], ids=["connection-delimited", "chunked"])
async def test_a_stream_ended_by_done_without_a_finish_reason_is_whole_on_both(
    make: Make, chunked: bool
) -> None:
    # [DONE] is the protocol's end of stream. The HTTP gateway took such an answer; litellm,
    # which does not say whether it saw [DONE], failed it as cut off, 3 times.
    with OpenAIServer(chunked=chunked) as server:
        gateway = make("openai/test-model", api_base=server.base_url, api_key="x")
        server.reply(TEXT, finish_reason="")
        response = await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
        assert response.message.content == TEXT and response.finish_reason is None
        # Without [DONE] either, it was cut: a retryable error, as before.
        server.reply(TEXT, finish_reason="", fault="cut")
        with pytest.raises(ModelError) as caught:
            await consume(gateway, True, LLMRequest(messages=[UserMessage(content="x")]))
        assert caught.value.retryable
