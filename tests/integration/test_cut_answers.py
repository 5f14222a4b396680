"""An answer the model's output limit or the provider's filter cut off is never a success.

Through both gateways' real client code against the loopback OpenAI server: a text answer
that stops with ``finish_reason: length`` is continued by the model and joined; one that keeps
being cut fails the task; one the content filter stopped fails it at once.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import pytest

from core_agent.container import create_kernel
from core_agent.contracts.settings import AgentSettings
from core_agent.replay import TaskRecords, fork_task, rerun_task
from shared.agent_protocol import LLMDelta, TaskRequest, TaskStatus
from support.openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.anyio

REQUEST = TaskRequest(task="用三句话介绍长城", force_mode="react")


@pytest.fixture(params=["litellm", "openai_http"])
def settings(request, litellm_settings: AgentSettings) -> AgentSettings:
    return litellm_settings.model_copy(update={"llm_gateway": request.param})


def sent_messages(server: OpenAIServer, index: int) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content"))) for m in server.requests[index]["messages"]]


async def test_a_cut_answer_is_continued_and_joined(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply("长城是中国古代的军事防御工", finish_reason="length")
    openai_server.reply("程，绵延两万多公里。", finish_reason="length")
    openai_server.reply("它是世界文化遗产。")
    limited = settings.model_copy(update={"model_max_tokens": 24})

    async with create_kernel(limited) as kernel:
        result = await kernel.execute_task(REQUEST)
        events = await kernel.task_events(result.task_id)

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "长城是中国古代的军事防御工程，绵延两万多公里。它是世界文化遗产。"
    assert len(openai_server.requests) == 3
    # AGENT_MODEL_MAX_TOKENS is the limit each answer is asked to keep to.
    assert {
        r.get("max_tokens") or r.get("max_completion_tokens") for r in openai_server.requests
    } == {24}
    # The model sees what it wrote and is asked to go on from there, not to start over.
    second = sent_messages(openai_server, 1)
    assert second[-2] == ("assistant", "长城是中国古代的军事防御工")
    assert second[-1][0] == "user" and "cut off" in second[-1][1]
    third = sent_messages(openai_server, 2)
    assert third[-2] == ("assistant", "程，绵延两万多公里。")
    assert [e.kind for e in events].count("llm.completed") == 3


async def test_an_answer_cut_every_time_fails_the_task(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    for _ in range(5):
        openai_server.reply("The wall is", finish_reason="length")

    async with create_kernel(settings) as kernel:
        result = await kernel.execute_task(REQUEST)

    assert result.status is TaskStatus.FAILED
    assert result.error_type == "ModelIncompleteError"
    assert "output token limit" in (result.error or "")
    assert len(openai_server.requests) == 4  # the answer, then three continuations


async def test_an_answer_the_content_filter_stopped_fails_without_a_retry(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply("Here is how to", finish_reason="content_filter")
    openai_server.reply("never asked for")
    retrying = settings.model_copy(update={"model_max_retries": 2, "model_retry_base_s": 0.01})

    async with create_kernel(retrying) as kernel:
        result = await kernel.execute_task(REQUEST)

    assert result.status is TaskStatus.FAILED
    assert result.error_type == "ModelIncompleteError"
    assert "content filter" in (result.error or "")
    assert len(openai_server.requests) == 1


async def test_tool_calls_of_a_turn_cut_after_them_still_run(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    # Whole arguments: only the text after them was cut, and the model writes its answer later.
    openai_server.reply(
        "Let me compute",
        tool_calls=[{"name": "calculator", "arguments": {"expression": "6 * 7"}}],
        finish_reason="length",
    )
    openai_server.reply("6 * 7 = 42")

    async with create_kernel(settings) as kernel:
        result = await kernel.execute_task(REQUEST)

    assert result.status is TaskStatus.SUCCEEDED and result.output == "6 * 7 = 42"
    assert sent_messages(openai_server, 1)[-1] == ("tool", "42")


async def test_a_run_left_while_continuing_a_cut_answer_resumes_with_the_text_so_far(
    litellm_settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply("长城是中国古代的", finish_reason="length")
    continuing = threading.Event()

    def hang(body: dict[str, Any]) -> Reply:
        continuing.set()
        return Reply(fault="hang")  # the continuation never comes: the host goes away

    openai_server.responder = hang
    settings = litellm_settings.model_copy(update={"recovery": "off", "model_timeout_s": 60})
    async with create_kernel(settings) as host, anyio.create_task_group() as group:
        group.start_soon(lambda: host.execute_task(REQUEST, task_id="left"))
        assert await anyio.to_thread.run_sync(continuing.wait, 30)
        host.leave_runs()
        group.cancel_scope.cancel()

    openai_server.responder = None
    openai_server.reply("军事防御工程。")
    async with create_kernel(settings) as successor:
        (result,) = await successor.recover("resume")

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "长城是中国古代的军事防御工程。"
    assert sent_messages(openai_server, 2)[-2] == ("assistant", "长城是中国古代的")


async def test_a_continued_answer_keeps_its_indentation_and_thinking_stays_out(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply("<think>写函数</think>\n\n```python\ndef f(x):\n", finish_reason="length")
    openai_server.reply("<think>接着写</think>\n\n    return x + 1\n```")

    async with create_kernel(settings) as kernel:
        events = [e async for e in kernel.stream_task(REQUEST)]
        result = await kernel.get_task(events[0].task_id)

    assert result.output == "```python\ndef f(x):\n    return x + 1\n```"
    assert "".join(e.text for e in events if isinstance(e, LLMDelta)) == result.output


async def test_a_plan_cut_by_the_token_limit_is_asked_for_again_not_run_short(
    settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    steps = [{"id": f"s{n}", "goal": f"第{n}步"} for n in (1, 2, 3)]
    whole = json.dumps({"steps": steps}, ensure_ascii=False)
    openai_server.reply(whole[: whole.index("s3") + 8], finish_reason="length")
    openai_server.reply(whole)
    openai_server.responder = lambda body: Reply("做完了")
    request = TaskRequest(task="分三步整理报告", force_mode="plan_execute")

    async with create_kernel(settings) as kernel:
        events = [e async for e in kernel.stream_task(request)]

    (created,) = [e for e in events if e.kind == "plan.created"]
    assert [step["id"] for step in created.steps] == ["s1", "s2", "s3"]
    assert "cut off by the output token limit" in str(openai_server.requests[1]["messages"])


async def test_a_fork_at_a_cut_answer_goes_on_with_it(
    litellm_settings: AgentSettings, openai_server: OpenAIServer
) -> None:
    openai_server.reply("长城是中国古代的军事防御工", finish_reason="length")
    openai_server.reply("程。")
    async with create_kernel(litellm_settings) as kernel:
        result = await kernel.execute_task(REQUEST)
    async with TaskRecords(litellm_settings) as records:
        replayed = await records.trajectory(result.task_id)
    cut = next(
        step.number
        for step in replayed.steps
        if step.kind == "model" and step.data.get("finish_reason") == "length"
    )

    openai_server.reply("程，绵延两万多公里。")
    fork = await fork_task(result.task_id, cut, settings=litellm_settings)

    assert fork.result.status is TaskStatus.SUCCEEDED
    assert fork.result.output == "长城是中国古代的军事防御工程，绵延两万多公里。"
    # The fork's model saw what the run's did: its cut answer, then the request to go on.
    sent = sent_messages(openai_server, len(openai_server.requests) - 1)
    assert sent[-2] == ("assistant", "长城是中国古代的军事防御工")
    assert sent[-1][0] == "user" and "cut off" in sent[-1][1]


TEMPLATE_OPENED = {
    # The first piece, cut mid-thought, had no tag at all: it was thinking, not the answer.
    "cut-mid-thought": (
        ["用户问长城。我记得它", "大约两万公里。\n</think>\n\n长城全长两万一千多公里。"]
    ),
    # The template opens a block in every prompt, the continuation's too: closing it again
    # says nothing about the text before, which came after a thought of its own.
    "each-piece-thinks": (
        ["用户问长城。\n</think>\n\n长城全长两万一千", "接着写。\n</think>\n\n多公里。"]
    ),
    # R1 distills often close an empty block, above all when going on.
    "empty-thoughts": (
        ["\n</think>\n\n长城全长", "</think>\n\n两万一千", "接着写。\n</think>\n\n多公里。"]
    ),
}
"""Answers of models whose chat template opens the thinking block (DeepSeek-R1, QwQ), in
pieces the token limit cut off; each is the answer "长城全长两万一千多公里。"."""


def reply_in_pieces(server: OpenAIServer, pieces: list[str]) -> None:
    for piece in pieces[:-1]:
        server.reply(piece, finish_reason="length")
    server.reply(pieces[-1])


@pytest.mark.parametrize("pieces", TEMPLATE_OPENED.values(), ids=TEMPLATE_OPENED.keys())
async def test_a_template_opened_models_pieces_join_into_its_answer(
    settings: AgentSettings, openai_server: OpenAIServer, pieces: list[str]
) -> None:
    reply_in_pieces(openai_server, pieces)

    async with create_kernel(settings) as kernel:
        result = await kernel.execute_task(REQUEST)

    assert result.status is TaskStatus.SUCCEEDED and result.output == "长城全长两万一千多公里。"


@pytest.mark.parametrize(
    "pieces",
    [["长城是中国古代的军事防御工", "程。"], TEMPLATE_OPENED["cut-mid-thought"]],
    ids=["continued", "thinking-dropped"],
)
async def test_a_rerun_joins_the_pieces_as_the_run_did(
    litellm_settings: AgentSettings, openai_server: OpenAIServer, pieces: list[str]
) -> None:
    reply_in_pieces(openai_server, pieces)
    async with create_kernel(litellm_settings) as kernel:
        result = await kernel.execute_task(REQUEST)

    report = await rerun_task(result.task_id, settings=litellm_settings)

    assert result.status is TaskStatus.SUCCEEDED
    assert report.output == result.output and report.reproduced
