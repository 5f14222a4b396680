"""Token-window and summary memory."""

from __future__ import annotations

import pytest
from core_agent.memory.summary_memory import SUMMARY_HEADER, SummaryMemory
from core_agent.memory.token_window import TokenWindowMemory

from core_agent.contracts.errors import UsageError
from core_agent.memory.hybrid_memory import RECALL_HEADER, HybridMemory
from fakes.gateways import FakeRecordingGateway
from fakes.stores import FakeMemoryStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedTurn
from providers.tiktoken_token_counter import TiktokenTokenCounter
from shared.agent_protocol import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

pytestmark = pytest.mark.anyio
COUNTER = TiktokenTokenCounter()


def turn(i: int) -> UserMessage:
    return UserMessage(content=f"message number {i} with a few extra words in it")


def test_counts_tokens_offline_like_the_provider() -> None:
    assert COUNTER.count_text("hello world") == 2
    messages = [SystemMessage(content="You help."), UserMessage(content="hello world")]
    # 3 framing + 1 role per message, plus 3 to prime the reply.
    assert COUNTER.count_messages(messages) == 3 + (4 + 3) + (4 + 2)


def test_window_keeps_the_system_prompt_and_drops_oldest_turns() -> None:
    window = TokenWindowMemory(COUNTER, max_tokens=80)
    window.add(SystemMessage(content="You are a careful assistant."))
    evicted = window.extend([turn(i) for i in range(10)])

    kept = window.messages()
    assert isinstance(kept[0], SystemMessage)
    assert window.tokens() <= 80
    assert kept[-1] == turn(9)
    assert evicted == [turn(i) for i in range(len(evicted))]
    assert [m for m in kept[1:]] == [turn(i) for i in range(len(evicted), 10)]


def test_a_tool_call_is_never_separated_from_its_result() -> None:
    window = TokenWindowMemory(COUNTER, max_tokens=90)
    call = AssistantMessage(
        tool_calls=(ToolCall(id="c1", name="calculator", arguments={"expression": "2+2"}),)
    )
    result = ToolMessage(tool_call_id="c1", name="calculator", content="4")
    window.extend([turn(0), call, result, turn(1), turn(2), turn(3)])

    kept = window.messages()
    assert (call in kept) == (result in kept)
    window.extend([turn(4), turn(5)])
    kept = window.messages()
    assert call not in kept and result not in kept
    assert not isinstance(kept[0], ToolMessage)


def test_the_newest_turn_stays_even_when_it_alone_is_over_budget() -> None:
    window = TokenWindowMemory(COUNTER, max_tokens=20)
    big = UserMessage(content="word " * 100)
    window.extend([turn(0), big])
    assert window.messages() == [big]
    with pytest.raises(UsageError):
        TokenWindowMemory(COUNTER, 0)


async def test_summary_memory_folds_evicted_turns_into_one_message() -> None:
    llm = FakeRecordingGateway(
        ScriptedLLMGateway(
            [ScriptedTurn(content="User counted to 3."), ScriptedTurn(content="User counted to 6.")]
        )
    )
    memory = SummaryMemory(COUNTER, llm, max_tokens=140, summary_tokens=40)
    await memory.add(SystemMessage(content="You help."))
    for i in range(12):
        await memory.add(turn(i))

    messages = memory.messages()
    assert messages[0] == SystemMessage(content="You help.")
    assert isinstance(messages[1], SystemMessage)
    assert messages[1].content.startswith(SUMMARY_HEADER)
    assert memory.summary in {"User counted to 3.", "User counted to 6."}
    assert messages[-1] == turn(11)
    assert llm.requests, "evicted turns were summarized by the model"
    second_prompt = llm.requests[-1].messages[1].content
    assert "message number" in second_prompt
    if len(llm.requests) > 1:
        assert "User counted to 3." in second_prompt  # the previous summary is folded in


async def test_hybrid_memory_puts_relevant_long_term_items_before_recent_turns() -> None:
    store = FakeMemoryStore()
    await store.put("long_term", "default", "user.language", "The user writes Python")
    await store.put("long_term", "default", "user.pet", "The user has a cat named Miso")
    window = TokenWindowMemory(COUNTER, max_tokens=500)
    window.extend([SystemMessage(content="You help."), turn(0), turn(1)])
    memory = HybridMemory(window, store, recall_k=3)

    context = await memory.context("what is my cat called?")

    assert context[0] == SystemMessage(content="You help.")
    assert isinstance(context[1], SystemMessage) and context[1].content.startswith(RECALL_HEADER)
    assert "Miso" in context[1].content and "Python" not in context[1].content
    assert context[2:] == [turn(0), turn(1)]
    assert await memory.context("") == window.messages()
