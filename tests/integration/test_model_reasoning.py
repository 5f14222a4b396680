"""A reasoning model's thinking is kept apart from its answer, whichever way the server sends it.

Qwen3, QwQ and the DeepSeek-R1 distills served raw write ``<think>…</think>`` into the text;
servers with a reasoning parser send ``reasoning_content`` apart. Either way the task's
output, the streamed text and the prompts that follow hold the answer only, and the trace
keeps the reasoning. Through both gateways' real client code and the loopback server.
"""

from __future__ import annotations

import json
import math

import pytest

from core_agent.container import create_kernel
from core_agent.contracts.settings import AgentSettings
from core_agent.orchestration.inline_reasoning import split_reasoning
from shared.agent_protocol import LLMCompleted, LLMDelta, TaskRequest, TaskStatus, UsageLimits
from support.openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.anyio

REQUEST = TaskRequest(task="长城有多长？", force_mode="react")
THOUGHT = "用户问长城的长度。我记得官方测量是两万多公里，应该简短回答。"
ANSWER = "长城全长两万一千多公里。"


@pytest.fixture(params=["litellm", "openai_http"])
def settings(request, litellm_settings: AgentSettings) -> AgentSettings:
    return litellm_settings.model_copy(update={"llm_gateway": request.param})


async def run(settings: AgentSettings, request: TaskRequest = REQUEST):  # type: ignore[no-untyped-def]
    async with create_kernel(settings) as kernel:
        events = [event async for event in kernel.stream_task(request)]
        result = await kernel.get_task(events[0].task_id)
        spans = await kernel.task_spans(result.task_id)
    return result, events, spans


@pytest.mark.parametrize(
    "text",
    [
        f"<think>{THOUGHT}</think>\n\n{ANSWER}",
        # The tag split across streamed pieces (the server cuts the text every 7 characters).
        f"\n<think>\n{THOUGHT}\n</think>\n\n{ANSWER}",
        # Templates that open the block in the prompt (DeepSeek-R1, QwQ): only the close.
        f"{THOUGHT}\n</think>\n\n{ANSWER}",
    ],
    ids=["tagged", "tag-split", "opened-in-the-prompt"],
)
async def test_inline_thinking_stays_out_of_the_answer(
    settings: AgentSettings, openai_server: OpenAIServer, text: str
) -> None:
    openai_server.reply(text)

    result, events, spans = await run(settings)

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == ANSWER
    (completed,) = [e for e in events if isinstance(e, LLMCompleted)]
    assert completed.message.content == ANSWER and completed.message.reasoning == THOUGHT
    streamed = "".join(e.text for e in events if isinstance(e, LLMDelta))
    if text.lstrip().startswith("<think>"):
        assert streamed == ANSWER  # held back while the model thinks
    else:
        assert streamed.endswith(ANSWER)  # its thinking could not be told apart until the end
    (llm,) = [s for s in spans if s.kind == "llm"]
    assert THOUGHT in str(llm.attributes["output_message"])  # the trace keeps it


async def test_reasoning_sent_apart_is_kept_and_never_sent_back(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply(
        "<think>要算一下</think>",
        tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}],
    )
    openai_server.reply("6 * 7 = 42", reasoning="工具说是42。")

    result, events, _ = await run(settings)

    assert result.status is TaskStatus.SUCCEEDED and result.output == "6 * 7 = 42"
    first, second = [e.message for e in events if isinstance(e, LLMCompleted)]
    assert (first.content, first.reasoning) == (None, "要算一下")
    assert (second.content, second.reasoning) == ("6 * 7 = 42", "工具说是42。")
    assert "工具说是42。" not in "".join(e.text for e in events if isinstance(e, LLMDelta))
    # The model gets its calls back, not its thinking.
    sent = openai_server.requests[1]["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    assert not assistant.get("content") and "reasoning_content" not in assistant
    assert "要算一下" not in str(sent)


async def test_the_sessions_history_holds_no_reasoning(
    litellm_settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply(
        "<think>先算一下</think>",
        tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}],
    )
    openai_server.reply("<think>好了</think>42")
    async with create_kernel(litellm_settings) as kernel:
        result = await kernel.execute_task(
            TaskRequest(task="6 乘 7？", session_id="s", force_mode="react")
        )
        transcript = await kernel.session_transcript("s")

    assert result.status is TaskStatus.SUCCEEDED and result.output == "42"
    kept = [entry.message for entry in transcript.entries]
    assert any(getattr(m, "tool_calls", ()) for m in kept)  # the call is in the history
    assert "先算一下" not in str(kept) and "好了" not in str(kept)


async def test_an_answer_that_was_all_thinking_is_tried_again(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply(f"<think>{THOUGHT}", finish_reason="length")
    openai_server.reply(f"<think>短一点。</think>{ANSWER}")
    retrying = settings.model_copy(update={"model_max_retries": 1, "model_retry_base_s": 0.01})

    result, events, spans = await run(retrying)

    assert result.status is TaskStatus.SUCCEEDED and result.output == ANSWER
    (failed,) = [s for s in spans if s.kind == "llm_attempt" and s.error]
    assert "only its reasoning" in failed.error and "AGENT_MODEL_MAX_TOKENS" in failed.error
    # The try whose answer was thrown away was paid for: its tokens count.
    (completed,) = [e for e in events if isinstance(e, LLMCompleted)]
    assert completed.usage.output_tokens == tokens(f"<think>{THOUGHT}") + tokens(
        f"<think>短一点。</think>{ANSWER}"
    )
    assert completed.usage.input_tokens == sum(prompt_tokens(r) for r in openai_server.requests)
    assert result.usage.output_tokens == completed.usage.output_tokens


async def test_a_call_that_fails_still_counts_the_answers_it_paid_for(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    for _ in range(2):
        openai_server.reply(f"<think>{THOUGHT}", finish_reason="length")
    retrying = settings.model_copy(update={"model_max_retries": 1, "model_retry_base_s": 0.01})

    result, _, spans = await run(retrying)

    assert result.status is TaskStatus.FAILED and "only its reasoning" in (result.error or "")
    assert result.usage.output_tokens == 2 * tokens(f"<think>{THOUGHT}")
    assert result.usage.input_tokens == sum(prompt_tokens(r) for r in openai_server.requests)
    (llm,) = [s for s in spans if s.kind == "llm"]
    assert llm.tokens_out == result.usage.output_tokens


def tokens(text: str) -> int:
    """The loopback server's count."""
    return max(1, math.ceil(len(text) / 4))


def prompt_tokens(request: dict) -> int:
    return tokens(json.dumps(request["messages"]))


async def test_a_plan_reads_past_the_planners_thinking(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    # The planner's call is not streamed: the whole answer is split the same way.
    plan = '{"steps": [{"id": "s1", "goal": "回答长城有多长"}]}'
    openai_server.reply(f"<think>{THOUGHT}</think>\n{plan}")
    openai_server.responder = lambda body: Reply(f"<think>简单。</think>{ANSWER}")

    result, events, _ = await run(
        settings, TaskRequest(task="长城有多长？", force_mode="plan_execute")
    )

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert [e.kind for e in events].count("plan.created") == 1  # the plan was read
    assert "<think>" not in (result.output or "") and ANSWER in (result.output or "")


@pytest.mark.parametrize(
    "text",
    [
        "Wrap it as <think>x</think> in the template.",
        "答案：使用</think>标签之前先写<think>。",
        "no reasoning here",
        "",
        # A closing tag on its own line, but in a code block, or after a tag with attributes.
        "In XML:\n```\nthe model thinks\n</think>\n```\nand then answers.",
        '```xml\n<think id="1">\n  hi\n</think>\n```',
    ],
)
def test_text_that_only_mentions_the_tags_is_left_alone(text: str) -> None:
    split = split_reasoning(text)
    assert (split.reasoning, split.answer) == (None, text)


def test_a_block_never_closed_is_all_reasoning() -> None:
    split = split_reasoning("<thinking>\n还在想")
    assert (split.reasoning, split.answer) == ("还在想", None)


def test_the_answers_own_indentation_stays() -> None:
    split = split_reasoning("<think>写个函数</think>\n\n    return x + 1\n")
    assert (split.reasoning, split.answer) == ("写个函数", "    return x + 1\n")
    assert split_reasoning("<think>短</think> 答案").answer == "答案"


async def test_a_retried_call_does_not_swell_the_next_prompts_forecast(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    # The input-token limit forecasts the next prompt from the latest one: that is the
    # answer's own prompt, not every try's.
    def script() -> None:
        openai_server.reply(f"<think>{THOUGHT}", finish_reason="length")
        openai_server.reply(
            "<think>算一下</think>",
            tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}}],
        )
        openai_server.reply("<think>好</think>42")

    retrying = settings.model_copy(update={"model_max_retries": 1, "model_retry_base_s": 0.01})
    script()
    measured, _, _ = await run(retrying)
    sent = sum(prompt_tokens(r) for r in openai_server.requests)
    assert measured.usage.input_tokens == sent

    script()
    limited = REQUEST.model_copy(update={"limits": UsageLimits(input_tokens=sent + 5)})
    result, _, _ = await run(retrying, limited)

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "42"
