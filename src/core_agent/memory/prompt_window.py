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

Use one window per conversation: each message is counted once (counts are cached by identity),
so a turn costs counting the messages it added, and the cache goes with the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

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
        self._counts: dict[int, tuple[ChatMessage, int]] = {}
        self._tool_tokens: dict[str, int] = {}

    @property
    def counter(self) -> ITokenCounter:
        """The token counter, built on first use (tiktoken loads its encoding then)."""
        if self._counter is None:
            self._counter = self._counter_factory()
        return self._counter

    def _count(self, message: ChatMessage) -> int:
        cached = self._counts.get(id(message))
        # The message is kept in the entry, so its id cannot be reused while cached.
        if cached is not None and cached[0] is message:
            return cached[1]
        tokens = self.counter.count_messages([message])
        self._counts[id(message)] = (message, tokens)
        return tokens

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
        """
        head, tail, capped = _capped(messages, max_turns, task)
        schema = json.dumps(
            [[t.name, t.description, t.parameters] for t in tools], ensure_ascii=False
        )
        if _utf8_bound([*head, *tail]) + len(schema.encode("utf-8")) <= self.max_tokens:
            # A token covers at least one byte: no need to tokenize anything.
            return _with_note(head, tail, capped), capped
        if schema not in self._tool_tokens:
            self._tool_tokens[schema] = self.counter.count_text(schema)
        sizes = [self._count(m) for m in tail]
        budget = self.max_tokens - self._tool_tokens[schema] - sum(self._count(m) for m in head)
        if sum(sizes) <= budget:
            return _with_note(head, tail, capped), capped
        budget -= self.counter.count_messages(
            [UserMessage(content=OMITTED_NOTE.format(count=len(messages)))]
        )
        kept_from = len(tail)
        for start, end in reversed(_units(tail)):
            size = sum(sizes[start:end])
            # The newest unit is always sent, even alone over budget: the model must see it.
            if size > budget and kept_from < len(tail):
                break
            budget -= size
            kept_from = start
        return _with_note(head, tail[kept_from:], capped + kept_from), capped + kept_from


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


def _utf8_bound(messages: Sequence[ChatMessage]) -> int:
    """An upper bound on the tokens ``messages`` take: their bytes plus framing."""
    total = 8
    for message in messages:
        total += 8 + len((message.content or "").encode("utf-8"))
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                arguments = (
                    json.dumps(call.arguments) if call.arguments is not None else call.raw_arguments
                )
                total += 8 + len(call.name) + len((arguments or "").encode("utf-8"))
        elif isinstance(message, ToolMessage):
            total += len(message.name.encode("utf-8"))
    return total
