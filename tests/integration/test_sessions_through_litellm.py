"""Sessions as conversations, through litellm's real code and a loopback OpenAI server."""

from __future__ import annotations

import re
from typing import Any

import pytest

from core_agent.container import create_kernel
from core_agent.contracts.settings import AgentSettings
from core_agent.memory.session_history import SUMMARY_HEADER
from core_agent.prompts import default_prompts
from providers.tiktoken_token_counter import TiktokenTokenCounter
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    TaskRequest,
    TaskStatus,
    UserMessage,
)
from support.openai_server import Reply

pytestmark = pytest.mark.anyio
SUMMARY_MARK = default_prompts().render("summary", words=0).split(".")[0]


def is_summary_request(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(SUMMARY_MARK)


async def test_the_second_task_of_a_session_sees_the_first_turn(
    litellm_settings, openai_server
) -> None:
    openai_server.reply(
        None,
        tool_calls=[
            {"id": "call_1", "name": "calculator", "arguments": {"expression": "17 * 23 + 4"}}
        ],
    )
    openai_server.reply("17 * 23 + 4 is 395.")
    openai_server.reply("You asked about 17 * 23 + 4; it was 395.")

    async with create_kernel(litellm_settings) as kernel:
        session = await kernel.create_session(user_id="ada", metadata={"app": "calculator"})
        first = await kernel.execute_task(
            TaskRequest(task="What is 17 * 23 + 4?", session_id=session.session_id)
        )
        second = await kernel.execute_task(
            TaskRequest(task="What did I just ask you?", session_id=session.session_id)
        )
        stored = await kernel.get_session(session.session_id)

    assert first.status is second.status is TaskStatus.SUCCEEDED
    assert (stored.user_id, stored.metadata, stored.task_count) == ("ada", {"app": "calculator"}, 2)
    # The third request (the second task's only one) holds the first turn whole, in order,
    # between the system prompt and the new message.
    messages = openai_server.requests[2]["messages"]
    assert messages[0]["role"] == "system"
    assert messages[1] == {"role": "user", "content": "What is 17 * 23 + 4?"}
    assert messages[2]["role"] == "assistant"
    assert messages[2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "395"}
    assert messages[4] == {"role": "assistant", "content": "17 * 23 + 4 is 395."}
    assert messages[5:] == [{"role": "user", "content": "What did I just ask you?"}]
    # A task in another session does not see it.
    openai_server.reply("Nothing yet.")
    async with create_kernel(litellm_settings) as kernel:
        await kernel.execute_task(TaskRequest(task="What did I just ask you?"))
    assert [m["role"] for m in openai_server.requests[3]["messages"]] == ["system", "user"]


def as_messages(body: dict[str, Any]) -> list[ChatMessage]:
    kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
    return [kinds[m["role"]](content=m["content"]) for m in body["messages"]]


async def test_a_300_turn_session_stays_in_a_small_window_through_a_reused_summary(
    tmp_path, openai_server
) -> None:
    window = 1000
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/test-model",
        model_api_base=openai_server.base_url,
        model_api_key="sk-test",
        model_max_retries=0,
        session_window_tokens=window,
        session_summary_tokens=100,
        memory_recall_k=0,
    )
    summaries: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            newest = re.findall(r"question (\d+)", body["messages"][-1]["content"])[-1]
            summaries.append(f"Summary {len(summaries) + 1}: questions 1 to {newest} asked.")
            return Reply(summaries[-1])
        (number,) = re.findall(r"question (\d+)", body["messages"][-1]["content"])
        return Reply(f"This is the answer to question {number}, with a few words more.")

    openai_server.responder = respond
    counter = TiktokenTokenCounter()
    turns = 300
    async with create_kernel(settings) as kernel:
        session = await kernel.create_session(user_id="ada")
        for n in range(1, turns + 1):
            result = await kernel.execute_task(
                TaskRequest(
                    task=f"Please answer question {n} of this long conversation.",
                    session_id=session.session_id,
                    tools=(),
                    force_mode="react",
                )
            )
            assert result.status is TaskStatus.SUCCEEDED, result.error
        tasks = await kernel.list_tasks(session_id=session.session_id, limit=turns)
        compactions = [
            span
            for task in tasks
            for span in await kernel.task_spans(task.task_id)
            if span.name == "memory.compaction"
        ]
        transcript = await kernel.session_transcript(session.session_id)

    chats = [b for b in openai_server.requests if not is_summary_request(b)]
    summary_calls = [b for b in openai_server.requests if is_summary_request(b)]
    assert len(chats) == turns
    # Every request stays inside the window: the task's own prompt and every summary request.
    assert max(counter.count_messages(as_messages(b)) for b in openai_server.requests) <= window
    # Folding leaves headroom, so the model summarized once per overflow, not once per task;
    # each summary was stored with the range it covers, and the tasks in between reused it.
    assert 5 < len(summary_calls) == len(compactions) == len(transcript.summaries) < turns // 5
    assert [s.content for s in transcript.summaries] == summaries
    assert all(span.status == "ok" and span.tokens_in and span.tokens_out for span in compactions)
    used = [
        next((m["content"] for m in b["messages"] if SUMMARY_HEADER in str(m["content"])), None)
        for b in chats
    ]
    first = used.index(next(u for u in used if u is not None))
    assert all(u is not None for u in used[first:])  # from the first summary on, always one
    assert len(set(used[first:])) == len(summaries)  # each one reused until the next overflow
    assert sum(used[i] != used[i - 1] for i in range(first + 1, turns)) == len(summaries) - 1
    # The whole history is kept for the transcript; the last turns are sent as they are.
    assert len(transcript.entries) == 2 * turns
    last = chats[-1]["messages"]
    assert last[-2]["content"] == "This is the answer to question 299, with a few words more."
    assert transcript.summaries[-1].through_seq < transcript.entries[-1].seq

    # The summary is persisted: a new process starts from it without asking for another.
    before = len(openai_server.requests)
    async with create_kernel(settings) as kernel:
        await kernel.execute_task(
            TaskRequest(
                task="Please answer question 301 of this long conversation.",
                session_id=session.session_id,
                tools=(),
                force_mode="react",
            )
        )
    (after,) = openai_server.requests[before:]
    assert not is_summary_request(after)
    assert any(summaries[-1] in str(m["content"]) for m in after["messages"])
