"""What of a long conversation is sent to the model: the start, then the newest turns that fit.

A task's conversation keeps growing (tool results can be long) while the model's input window
does not. ``PromptWindow`` leaves the conversation itself untouched (it is checkpointed and
traced whole) and picks, for each model call, the messages to send:

* the opening messages, up to and including the task's own user message (system prompt,
  recalled memories, the session's history, the task itself), always; without ``task``, up
  to the first user message;
* then the newest turns, whole units (an assistant message that calls tools stays with its
  results), as many as fit;
* between the two, when turns were left out, a short note that says so, so the model knows
  its view is partial.

Use one window per conversation: each message is measured once (its bytes, its tokens when
they are needed, where its turn starts), kept with running totals, so a model call costs
measuring the messages added since the last one, not the whole conversation; the
measurements go with the conversation.
"""

from __future__ import annotations

import bisect
import json
import operator
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from core_agent.contracts.errors import UsageError
from core_agent.contracts.llm_gateway import ToolDefinition
from core_agent.contracts.token_counter import ITokenCounter
from shared.agent_protocol import AssistantMessage, ChatMessage, ToolMessage, UserMessage

OMITTED_NOTE = (
    "[core-agent] {count} earlier messages of this conversation were left out to fit the "
    "model's context window; the most recent ones follow."
)


class PromptWindow:
    """Fits a conversation into ``max_tokens`` (see the module docstring)."""

    def __init__(self, counter: Callable[[], ITokenCounter], max_tokens: int) -> None:
        if max_tokens < 1:
            raise UsageError("max_tokens must be at least 1")
        self._counter_factory = counter
        self._counter: ITokenCounter | None = None
        self.max_tokens = max_tokens
        self._tool_tokens: dict[str, int] = {}
        self._schema: tuple[tuple[ToolDefinition, ...], str] = ((), "[]")
        self._measured = _Measured()

    @property
    def counter(self) -> ITokenCounter:
        """The token counter, built on first use (tiktoken loads its encoding then)."""
        if self._counter is None:
            self._counter = self._counter_factory()
        return self._counter

    def fit(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDefinition] = (),
        *,
        max_turns: int | None = None,
        task: str | None = None,
    ) -> tuple[list[ChatMessage], int]:
        """The messages to send with ``tools``, and how many of ``messages`` were left out.

        With ``max_turns``, no more than that many of the newest turns are sent even when
        more would fit (after a provider refused a prompt as too long: its count is not ours).
        ``task`` is the text of the task's own user message, which ends the opening.
        Each message is measured (bytes, tokens, where its turn starts) once, when a call
        first sees it; a later call measures only the messages added since, so a growing
        conversation costs the same to fit at its 500th message as at its 10th.
        """
        measured = self._measured.update(messages, task)
        head_end, total = measured.head_end, len(messages)
        starts = measured.unit_starts
        cut = head_end
        if max_turns is not None and len(starts) > max_turns:
            cut = starts[-max_turns] if max_turns > 0 else total
        capped = cut - head_end
        head, schema = messages[:head_end], self._schema_text(tools)
        bound = 8 + measured.bytes_before(head_end) + measured.bytes_between(cut, total)
        if bound + len(schema.encode("utf-8")) <= self.max_tokens:
            # A token covers at least one byte: no need to tokenize anything.
            return _with_note(list(head), list(messages[cut:]), capped), capped
        if schema not in self._tool_tokens:
            self._tool_tokens[schema] = self.counter.count_text(schema)
        tokens = measured.count_tokens(self.counter)
        budget = self.max_tokens - self._tool_tokens[schema] - tokens[head_end]
        if tokens[total] - tokens[cut] <= budget:
            return _with_note(list(head), list(messages[cut:]), capped), capped
        budget -= self.counter.count_messages(
            [UserMessage(content=OMITTED_NOTE.format(count=total))]
        )
        # The oldest turn start from which the newest turns fit; the newest turn is always
        # sent, even alone over budget: the model must see it.
        first = bisect.bisect_left(starts, cut)
        fits = bisect.bisect_left(starts, tokens[total] - budget, lo=first, key=tokens.__getitem__)
        if fits < len(starts):
            kept_from = starts[fits]
        else:  # not even the newest turn fits: it goes alone (if there is one)
            kept_from = starts[-1] if first < len(starts) else total
        omitted = kept_from - head_end
        return _with_note(list(head), list(messages[kept_from:]), omitted), omitted

    def _schema_text(self, tools: Sequence[ToolDefinition]) -> str:
        """The tools as the budget counts them; the same definitions give the cached text."""
        cached, text = self._schema
        if len(cached) == len(tools) and all(map(operator.is_, cached, tools)):
            return text
        text = tool_definitions_text(tools)
        self._schema = (tuple(tools), text)
        return text


class _Described(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]: ...


def tool_definitions_text(tools: Sequence[_Described]) -> str:
    """The tools' names, descriptions and schemas as one text, as prompt budgets count them."""
    return json.dumps([[t.name, t.description, t.parameters] for t in tools], ensure_ascii=False)


class _Measured:
    """What ``PromptWindow.fit`` knows of the conversation it saw last, message by message.

    Prefix sums of each message's byte bound (``_utf8_bound``'s terms) and token count, and
    where each turn after the opening starts (``_units``). A conversation that still starts
    with the messages already measured (the same objects: one identity check each, no
    serialisation) is measured only from where it grew; any other is measured anew.
    """

    def __init__(self) -> None:
        self._reset(0)

    def _reset(self, head_end: int) -> None:
        self.messages: list[ChatMessage] = []
        self.head_end = head_end
        self.bytes: list[int] = [0]
        self.tokens: list[int] = [0]
        self.unit_starts: list[int] = []
        self._open_calls: frozenset[str] = frozenset()
        """Ids of the calls of the newest turn, while their results may still follow."""

    def update(self, messages: Sequence[ChatMessage], task: str | None = None) -> _Measured:
        """Measure what ``messages`` added (or all of it, when it is another conversation)."""
        known = len(self.messages)
        grown = (
            self.head_end > 0
            and len(messages) >= known
            and all(map(operator.is_, self.messages, messages))
        )
        # A run adds no message that moves the opening's end: it is looked for once.
        if not grown:
            self._reset(opening_end(messages, task))
            known = 0
        for index in range(known, len(messages)):
            message = messages[index]
            self.messages.append(message)
            self.bytes.append(self.bytes[-1] + _utf8_size(message))
            if index < self.head_end:
                continue
            if isinstance(message, ToolMessage) and message.tool_call_id in self._open_calls:
                continue  # a result stays in its call's turn
            self.unit_starts.append(index)
            calls = message.tool_calls if isinstance(message, AssistantMessage) else ()
            self._open_calls = frozenset(call.id for call in calls)
        return self

    def bytes_before(self, end: int) -> int:
        """The byte bound of the first ``end`` messages."""
        return self.bytes[end]

    def bytes_between(self, start: int, end: int) -> int:
        """The byte bound of messages ``start`` to ``end`` (excluded)."""
        return self.bytes[end] - self.bytes[start]

    def count_tokens(self, counter: ITokenCounter) -> list[int]:
        """Token prefix sums over every message (``[i]``: the first ``i``), counting new ones."""
        for message in self.messages[len(self.tokens) - 1 :]:
            self.tokens.append(self.tokens[-1] + counter.count_messages([message]))
        return self.tokens


def newest_turns(
    messages: Sequence[ChatMessage], max_turns: int | None, task: str | None = None
) -> tuple[list[ChatMessage], int]:
    """The opening messages and at most ``max_turns`` newest turns, with the note when cut.

    What ``PromptWindow.fit`` does with ``max_turns`` when no token budget is set.
    """
    head, tail, capped = _capped(messages, max_turns, task)
    return _with_note(head, tail, capped), capped


def turns_sent(sent: Sequence[ChatMessage], omitted: int, task: str | None = None) -> int:
    """How many turns (see ``_units``) after the opening messages ``sent`` holds.

    ``omitted`` is what ``fit`` or ``newest_turns`` returned with ``sent``: when it is not 0,
    the note that says so is not a turn.
    """
    turns = len(_units(sent[opening_end(sent, task) :]))
    return turns - 1 if omitted else turns


def _capped(
    messages: Sequence[ChatMessage], max_turns: int | None, task: str | None
) -> tuple[list[ChatMessage], list[ChatMessage], int]:
    """The opening messages, the newest ``max_turns`` turns after them, how many were cut."""
    head_end = opening_end(messages, task)
    head, tail = list(messages[:head_end]), list(messages[head_end:])
    if max_turns is None:
        return head, tail, 0
    units = _units(tail)
    if len(units) <= max_turns:
        return head, tail, 0
    cut = units[-max_turns][0] if max_turns > 0 else len(tail)
    return head, tail[cut:], cut


def _with_note(head: list[ChatMessage], tail: list[ChatMessage], omitted: int) -> list[ChatMessage]:
    if not omitted:
        return [*head, *tail]
    return [*head, UserMessage(content=OMITTED_NOTE.format(count=omitted)), *tail]


def opening_end(messages: Sequence[ChatMessage], task: str | None = None) -> int:
    """Where the opening ends: after the task's own user message.

    That is the last user message whose text is ``task``: a session's history may hold the
    same text earlier, and a run adds no user message with it. Without ``task`` (or when no
    message has it), after the first user message.
    """
    if task is not None:
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, UserMessage) and message.content == task:
                return index + 1
    for index, message in enumerate(messages):
        if isinstance(message, UserMessage):
            return index + 1
    return 0


def _units(messages: Sequence[ChatMessage]) -> list[tuple[int, int]]:
    """``[start, end)`` spans: a tool-calling assistant message with its results, or one message."""
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(messages):
        end = index + 1
        head = messages[index]
        if isinstance(head, AssistantMessage) and head.tool_calls:
            ids = {call.id for call in head.tool_calls}
            while (
                end < len(messages)
                and isinstance(messages[end], ToolMessage)
                and messages[end].tool_call_id in ids  # type: ignore[union-attr]
            ):
                end += 1
        spans.append((index, end))
        index = end
    return spans


def _utf8_size(message: ChatMessage) -> int:
    """An upper bound on the tokens ``message`` takes: its bytes plus framing.

    A whole prompt is bounded by 8 plus the sum over its messages.
    """
    total = 8 + len((message.content or "").encode("utf-8"))
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            arguments = (
                json.dumps(call.arguments) if call.arguments is not None else call.raw_arguments
            )
            total += 8 + len(call.name) + len((arguments or "").encode("utf-8"))
    elif isinstance(message, ToolMessage):
        total += len(message.name.encode("utf-8"))
    return total
