"""The prompt window: what of a long conversation reaches the model."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from core_agent.contracts.llm_gateway import ToolDefinition
from core_agent.memory.prompt_window import OMITTED_NOTE, PromptWindow
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


def reference_fit(
    messages: list[ChatMessage], budget: int, max_turns: int | None
) -> tuple[list[ChatMessage], int]:
    """What ``fit`` must send, worked out the slow way: every message measured every time."""
    counter = FakeWordTokenCounter()
    head_end = next(i + 1 for i, m in enumerate(messages) if isinstance(m, UserMessage))
    head, tail = messages[:head_end], messages[head_end:]
    units: list[list[ChatMessage]] = []
    for message in tail:  # a call's results join its turn
        opener = units[-1][0] if units else None
        calls = {c.id for c in opener.tool_calls} if isinstance(opener, AssistantMessage) else ()
        if isinstance(message, ToolMessage) and message.tool_call_id in calls:
            units[-1].append(message)
        else:
            units.append([message])
    if max_turns is not None and len(units) > max_turns:
        units = units[len(units) - max_turns :] if max_turns else []
    budget -= counter.count_text(SCHEMA) + counter.count_messages(head)
    if counter.count_messages([m for u in units for m in u]) > budget:
        budget -= counter.count_messages(
            [UserMessage(content=OMITTED_NOTE.format(count=len(messages)))]
        )
        kept: list[list[ChatMessage]] = []
        for unit in reversed(units):
            size = counter.count_messages(unit)
            if size > budget and kept:
                break
            budget -= size
            kept.insert(0, unit)
        units = kept
    sent_tail = [m for u in units for m in u]
    omitted = len(tail) - len(sent_tail)
    if not omitted:
        return [*head, *sent_tail], 0
    note = UserMessage(content=OMITTED_NOTE.format(count=omitted))
    return [*head, note, *sent_tail], omitted


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(min_value=40, max_value=1500),
    sizes=st.lists(st.integers(min_value=0, max_value=80), min_size=1, max_size=25),
    max_turns=st.none() | st.integers(min_value=0, max_value=6),
)
def test_a_window_that_saw_the_conversation_grow_fits_it_as_measured_afresh(
    budget: int, sizes: list[int], max_turns: int | None
) -> None:
    # One window per conversation measures each message once; what it sends must be what
    # measuring the whole conversation again would give.
    growing, _ = window(budget)
    messages = conversation(0)
    for n, size in enumerate(sizes):
        messages.extend(tool_turn(n, words=size))
        if n % 4 == 3:
            messages.append(AssistantMessage(content="noting " * (size // 3)))
        assert growing.fit(messages, TOOLS, max_turns=max_turns) == reference_fit(
            messages, budget, max_turns
        )


def test_a_conversation_rebuilt_in_place_is_measured_anew() -> None:
    fitting, _ = window(300)
    messages = conversation(20)
    fitting.fit(messages, TOOLS)
    # Compaction: the middle replaced by a summary, as long as before; then a short one.
    summary = UserMessage(content="Summary: " + "word " * 5)
    messages[2:-2] = [summary] + [AssistantMessage(content="ok")] * (len(messages) - 5)
    assert fitting.fit(messages, TOOLS) == reference_fit(messages, 300, None)
    short = conversation(1)
    assert fitting.fit(short, TOOLS) == (short, 0)
