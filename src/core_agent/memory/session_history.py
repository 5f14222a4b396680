"""A session's history: what a finished task adds to it, and how it is put before a new task.

A session is a conversation. Each task that ends adds one *turn* to the session's history:

* the user's message (the task's text);
* each model message of the run that called tools (without the model's reasoning, which
  stays in the task's trace), with the results of those calls, each result cut to a bound
  (head and tail kept, like a tool's output in the run), so the history says what was
  looked up or changed without carrying whole files;
* the answer, as an assistant message; for a task that ended without one (failed,
  canceled), an assistant note saying so and why, so a later "try again" has its context.

The run's other messages (notices to the model, a human's guidance, a plan's step prompts)
are the run's own business and stay out; so do tool calls whose results never came.

A new task of the session sees, after its system prompt and recalled memories: the latest
summary of the oldest turns (see ``conversation_compaction``), then the turns it does not
cover, then the task itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core_agent.contracts.text_cuts import SecretSpans, cut_middle
from core_agent.contracts.untrusted import wrap_untrusted
from core_agent.memory.prompt_window import opening_end
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    SessionEntry,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

SUMMARY_HEADER = "Summary of the earlier conversation in this session:"
OMITTED_TURNS_NOTE = (
    "[core-agent] {count} earlier turns of this session are left out: they no longer fit the "
    "session's window and could not be summarized. The most recent turns follow."
)
NO_ANSWER_NOTE = "[core-agent] This task ended {status} without an answer: {error}"


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """The entries one task added to the history, in order."""

    task_id: str
    entries: tuple[SessionEntry, ...]

    @property
    def messages(self) -> list[ChatMessage]:
        """The turn's messages."""
        return [entry.message for entry in self.entries]

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the turn's last entry."""
        return self.entries[-1].seq

    @property
    def tainted(self) -> bool:
        """Whether the task that wrote it held untrusted content."""
        return any(entry.tainted for entry in self.entries)


def turns_of(entries: Sequence[SessionEntry]) -> list[SessionTurn]:
    """``entries`` (in ``seq`` order) grouped into the turns of consecutive tasks."""
    turns: list[SessionTurn] = []
    current: list[SessionEntry] = []
    for entry in entries:
        if current and entry.task_id != current[0].task_id:
            turns.append(SessionTurn(current[0].task_id, tuple(current)))
            current = []
        current.append(entry)
    if current:
        turns.append(SessionTurn(current[0].task_id, tuple(current)))
    return turns


def summary_message(summary: str, *, tainted: bool = False) -> SystemMessage:
    """The summary as the message that stands for the turns it covers.

    A summary folded from tainted turns may carry an injection the summarising model copied:
    it is given as untrusted data, not with a system message's authority.
    """
    if tainted:
        summary = wrap_untrusted(summary, source="session summary")
    return SystemMessage(content=f"{SUMMARY_HEADER}\n{summary}")


def history_messages(
    summary: str | None,
    turns: Sequence[SessionTurn],
    *,
    omitted: int = 0,
    summary_tainted: bool = False,
) -> list[ChatMessage]:
    """What goes between the recalled memories and the new task's message."""
    messages: list[ChatMessage] = []
    if summary:
        messages.append(summary_message(summary, tainted=summary_tainted))
    if omitted:
        messages.append(SystemMessage(content=OMITTED_TURNS_NOTE.format(count=omitted)))
    for turn in turns:
        messages.extend(turn.messages)
    return messages


SESSION_MARKER = "\n[... {n} characters left out of the session history ...]\n"


def shorten(text: str, limit: int, secrets: SecretSpans | None = None) -> str:
    """A tool result for a session's history: ``cut_middle`` with the session's marker."""
    return cut_middle(text, limit, SESSION_MARKER, secrets)


def turn_messages(
    task: str,
    conversation: Sequence[ChatMessage],
    *,
    output: str | None,
    status: str,
    error: str | None,
    result_chars: int,
    secrets: SecretSpans | None = None,
) -> list[ChatMessage]:
    """The turn a finished task adds to its session (see the module docstring).

    ``conversation`` is the run's messages as the executor left them (its opening included:
    the run's own part starts after the task's message).
    """
    messages: list[ChatMessage] = [UserMessage(content=task)]
    run = conversation[opening_end(conversation, task) :]
    results = {m.tool_call_id: m for m in run if isinstance(m, ToolMessage)}
    for message in run:
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        if not all(call.id in results for call in message.tool_calls):
            continue  # a call whose result never came (or the typed answer's own call)
        # What the model thought stays in the task's trace: later tasks are never sent it.
        messages.append(message.model_copy(update={"reasoning": None}))
        for call in message.tool_calls:
            result = results[call.id]
            messages.append(
                result.model_copy(
                    update={"content": shorten(result.content, result_chars, secrets)}
                )
            )
    if output is not None and status == "succeeded":
        messages.append(AssistantMessage(content=output))
    else:
        messages.append(
            AssistantMessage(
                content=NO_ANSWER_NOTE.format(status=status, error=error or "no reason given")
            )
        )
    return messages
