"""A server that reports no token counts still has its tokens counted, and limits hold."""

from pathlib import Path

import pytest

from core_agent import KernelContainer
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import TaskRequest, TaskStatus, UsageLimits
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

CHINESE_ANSWER = "这是一个很长的回答，" * 20


def _settings(tmp_path: Path, server: OpenAIServer, gateway: str = "openai_http") -> AgentSettings:
    # Both gateways report what the server sent: 0 tokens when it sent no usage (litellm's
    # own count of the messages, made up when the server sent none, is not taken: it leaves
    # the tool schemas out). The kernel must not see a free call.
    return AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/local-model",
        model_api_base=server.base_url,
        llm_gateway=gateway,
        model_max_retries=0,
        model_timeout_s=20,
    )


@pytest.mark.parametrize("gateway", ["openai_http", "litellm"])
async def test_tokens_a_server_did_not_report_are_estimated_and_traced(
    tmp_path: Path, openai_server: OpenAIServer, gateway: str
) -> None:
    openai_server.reply(CHINESE_ANSWER, report_usage=False)
    container = KernelContainer()
    container.settings.override(_settings(tmp_path, openai_server, gateway))
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="用中文写一段话", force_mode="react"))
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.usage.input_tokens > 0
    # Two hundred Chinese characters are far more than a handful of tokens.
    assert result.usage.output_tokens > 50
    (llm,) = [span for span in spans if span.kind == "llm"]
    assert llm.attributes.get("usage_estimated") is True
    assert (llm.tokens_in, llm.tokens_out) == (
        result.usage.input_tokens,
        result.usage.output_tokens,
    )


async def test_reported_counts_are_kept_as_the_server_sent_them(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.reply(CHINESE_ANSWER)
    container = KernelContainer()
    container.settings.override(_settings(tmp_path, openai_server))
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="用中文写一段话", force_mode="react"))
        spans = await kernel.task_spans(result.task_id)
    (llm,) = [span for span in spans if span.kind == "llm"]
    assert "usage_estimated" not in llm.attributes
    # The test server's own count (a token per four characters of the JSON it was sent).
    assert result.usage.output_tokens == -(-len(CHINESE_ANSWER) // 4)


async def test_a_token_limit_stops_a_task_whose_server_reports_no_usage(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    record = {"name": "calculator", "arguments": {"expression": "1+1"}}
    for _ in range(10):
        openai_server.reply("先算一下。" * 40, tool_calls=[record], report_usage=False)
    container = KernelContainer()
    container.settings.override(_settings(tmp_path, openai_server))
    async with container.kernel() as kernel:
        result = await kernel.execute_task(
            TaskRequest(
                task="算十次",
                force_mode="react",
                limits=UsageLimits(output_tokens=300),
            )
        )
    assert result.status is TaskStatus.FAILED
    assert "output_tokens" in (result.error or "")
    # Stopped after a few calls, not after all ten.
    assert len(openai_server.requests) < 10
