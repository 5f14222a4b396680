"""LiteLLMGateway against a real loopback server that speaks the OpenAI protocol."""

import pytest

from core_agent.contracts.errors import (
    ModelAuthenticationError,
    ModelError,
    ModelRateLimitError,
)
from core_agent.contracts.llm_gateway import LLMRequest, LLMResponse, LLMTextDelta, ToolDefinition
from providers.litellm_gateway import LiteLLMGateway
from shared.agent_protocol import AssistantMessage, ToolCall, ToolMessage, UserMessage

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


@pytest.fixture
def gateway(litellm_settings) -> LiteLLMGateway:
    return LiteLLMGateway.from_settings(litellm_settings)


async def test_plain_completion_reports_text_and_tokens(gateway, openai_server) -> None:
    openai_server.reply("Paris is the capital.")
    response = await gateway.complete(LLMRequest(messages=[UserMessage(content="Capital?")]))
    assert response.message.content == "Paris is the capital."
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert openai_server.requests[0]["model"] == "test-model"
    assert openai_server.requests[0]["messages"] == [{"role": "user", "content": "Capital?"}]


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


async def test_an_unreachable_server_is_a_retryable_model_error(litellm_settings) -> None:
    gateway = LiteLLMGateway(
        "openai/test-model",
        api_base="http://127.0.0.1:9/v1",
        api_key="x",
        max_retries=0,
        timeout_s=5,
    )
    with pytest.raises(ModelError) as caught:
        await gateway.complete(LLMRequest(messages=[UserMessage(content="x")]))
    assert caught.value.retryable


def test_the_context_window_comes_from_litellms_bundled_table() -> None:
    # Read offline (LITELLM_LOCAL_MODEL_COST_MAP); a self-hosted model is simply unknown.
    assert LiteLLMGateway("openai/gpt-4o-mini").context_window() == 128_000
    assert LiteLLMGateway("openai/some-self-hosted-model").context_window() is None
