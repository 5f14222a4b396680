"""The prompt window: what of a long conversation reaches the model."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from core_agent.contracts.llm_gateway import ToolDefinition
from core_agent.memory.prompt_window import PromptWindow
from fakes.token_counters import FakeWordTokenCounter
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

TOOLS = [ToolDefinition("lookup", "Look a word up.", {"type": "object", "properties": {}})]
SCHEMA = json.dumps([[t.name, t.description, t.parameters] for t in TOOLS], ensure_ascii=False)


def window(budget: int) -> tuple[PromptWindow, FakeWordTokenCounter]:
    counter = FakeWordTokenCounter()
    return PromptWindow(lambda: counter, budget), counter


def tool_turn(n: int, words: int = 30) -> list[ChatMessage]:
    call = ToolCall(id=f"c{n}", name="lookup", arguments={"word": f"w{n}"})
    return [
        AssistantMessage(tool_calls=(call,)),
        ToolMessage(tool_call_id=f"c{n}", name="lookup", content=" ".join(["result"] * words)),
    ]


def conversation(turns: int) -> list[ChatMessage]:
    messages: list[ChatMessage] = [
        SystemMessage(content="You are terse."),
        UserMessage(content="Find the meaning of every word on the list."),
    ]
    for n in range(turns):
        messages.extend(tool_turn(n))
    return messages


def test_a_conversation_that_fits_is_sent_whole_without_counting() -> None:
    fitting, counter = window(10_000)
    messages = conversation(3)
    assert fitting.fit(messages, TOOLS) == (messages, 0)
    assert counter.counted == []


def test_the_opening_and_the_newest_turns_are_kept_with_a_note_between() -> None:
    fitting, counter = window(300)
    messages = conversation(20)
    sent, omitted = fitting.fit(messages, TOOLS)

    assert sent[:2] == messages[:2]  # the system prompt and the task itself
    note = sent[2]
    assert isinstance(note, UserMessage) and "left out" in note.content
    kept = sent[3:]
    assert kept == messages[len(messages) - len(kept) :]  # the newest, in order
    assert omitted == len(messages) - 2 - len(kept)
    assert note.content.startswith(f"[core-agent] {omitted} earlier")
    assert isinstance(kept[0], AssistantMessage)  # never a result without its call
    assert counter.count_messages(sent) + counter.count_text(SCHEMA) <= 300


def test_the_newest_turn_is_sent_even_when_it_alone_is_over_budget() -> None:
    fitting, _ = window(60)
    messages = [*conversation(2), *tool_turn(99, words=500)]
    sent, omitted = fitting.fit(messages, TOOLS)
    assert omitted == 4
    assert sent[-2:] == messages[-2:]
    assert isinstance(sent[2], UserMessage) and "left out" in sent[2].content


def test_each_message_is_counted_once_as_the_conversation_grows() -> None:
    fitting, counter = window(200)
    messages = conversation(10)
    for n in range(10, 20):
        fitting.fit(messages, TOOLS)
        messages.extend(tool_turn(n))
    fitting.fit(messages, TOOLS)
    conversation_messages = [m for m in counter.counted if "left out" not in (m.content or "")]
    assert len(conversation_messages) == len({id(m) for m in conversation_messages})


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=40, max_value=2000),
    sizes=st.lists(st.integers(min_value=0, max_value=120), min_size=0, max_size=30),
)
def test_any_conversation_keeps_calls_with_their_results(budget: int, sizes: list[int]) -> None:
    fitting, counter = window(budget)
    messages = conversation(0)
    for n, size in enumerate(sizes):
        messages.extend(tool_turn(n, words=size))
        if n % 3 == 2:
            messages.append(AssistantMessage(content="thinking " * (size // 4)))
    sent, omitted = fitting.fit(messages, TOOLS)

    assert sent[:2] == messages[:2]
    called = set()
    for message in sent:
        if isinstance(message, AssistantMessage):
            called |= {c.id for c in message.tool_calls}
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in called
    assert (sent == messages) == (omitted == 0)
    if omitted:
        tail = sent[3:]
        assert len(tail) == len(messages) - 2 - omitted
        assert tail == messages[len(messages) - len(tail) :]
        over = counter.count_messages(sent) + counter.count_text(SCHEMA) > budget
        # Over budget only when the newest turn alone does not fit.
        assert not over or len(tail) <= 2
