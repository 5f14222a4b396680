"""Sessions as conversations: the history a task starts from, and the turn it adds when it ends.

When a task of a session starts, ``prepare`` puts the session's history between the recalled
memories and the task's message, fitted to ``AGENT_SESSION_WINDOW_TOKENS`` together with
everything else the first request holds (system prompt, memories, the message, the tool
schemas). History that does not fit is compacted (``conversation_compaction``): the oldest
turns are summarized by the model in a ``memory.compaction`` span, and the summary is stored
with the last entry it covers, so later tasks start from it and the model is asked again only
when newer turns overflow. A summary call that fails does not fail the task: the turns it
would have covered are left out of this task's prompt, the span says so, and the next task
tries again.

When the task ends (succeeded, failed or canceled), ``record`` appends its turn
(``session_history``). A task waiting for a human adds nothing until it ends; the session
takes no other task meanwhile (``ITaskStore.create_task`` with ``exclusive``).

The kernel records the turn with the move that ends the task (``TaskLifecycle.on_end``): on
SQLite both commit in one transaction, so a process that dies at the end leaves either both
or neither. A task ended by another process gets its turn from its host afterwards, and a
task whose caller was cancelled (it gets no result) adds none. A task that ends where nobody
runs it (canceled while queued or waiting for a human, or an orphan canceled or failed by
recovery) gets a turn of its message and how it ended, stored with that move
(``record_ended_unrun``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from core_agent.contracts.errors import CoreAgentError
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.llm_gateway import ILLMGateway
from core_agent.contracts.session_store import ISessionStore
from core_agent.contracts.text_cuts import SecretSpans
from core_agent.contracts.token_counter import ITokenCounter
from core_agent.contracts.tool import ToolSpec
from core_agent.contracts.trace_store import ITraceStore
from core_agent.memory.conversation_compaction import ConversationCompactor
from core_agent.memory.prompt_window import tool_definitions_text
from core_agent.memory.session_history import (
    SessionTurn,
    history_messages,
    summary_message,
    turn_messages,
    turns_of,
)
from core_agent.observability.tracer import Tracer, usage_attributes
from core_agent.prompts import PromptSet
from shared.agent_protocol import (
    ChatMessage,
    SessionSummary,
    TaskResult,
    TaskState,
    TaskStatus,
)

log = logging.getLogger(__name__)


class SessionConversations:
    """The kernel's side of sessions: their store, and history in and out of each task."""

    def __init__(
        self,
        store: ISessionStore,
        trace_store: ITraceStore,
        *,
        llm: ILLMGateway,
        counter: Callable[[], ITokenCounter],
        window_tokens: int | Callable[[], int],
        summary_tokens: int = 512,
        result_chars: int = 2000,
        prompts: PromptSet | None = None,
        secrets: SecretSpans | None = None,
    ) -> None:
        self.store = store
        self._prompts = prompts
        self._trace_store = trace_store
        self._llm = llm
        self._counter_factory = counter
        self._compactor: ConversationCompactor | None = None
        self._window = window_tokens
        self._window_tokens: int | None = None
        self._summary_tokens = summary_tokens
        self._result_chars = result_chars
        self._secrets = secrets
        """Where the stores' redaction finds secrets: a result is not shortened through one."""

    @property
    def window_tokens(self) -> int:
        """The session window; a callable given for it is asked once, on first use."""
        if self._window_tokens is None:
            window = self._window
            self._window_tokens = window if isinstance(window, int) else window()
        return self._window_tokens

    @property
    def compactor(self) -> ConversationCompactor:
        """Built on first use: the token counter loads its encoding then."""
        if self._compactor is None:
            self._compactor = ConversationCompactor(
                self._counter_factory(),
                self._llm,
                summary_tokens=self._summary_tokens,
                request_tokens=self.window_tokens,
                prompts=self._prompts,
            )
        return self._compactor

    async def prepare(
        self, state: TaskState, context: ExecutionContext, tools: Sequence[ToolSpec]
    ) -> None:
        """Put the session's history, fitted to the window, before the task's message.

        ``context.run.messages`` holds the opening so far, the task's message last. The task
        is marked tainted when history written by a tainted task is put in.
        """
        history = await self.store.history(state.session_id)
        if history.summary is None and not history.entries:
            return
        compactor = self.compactor
        messages = context.run.messages
        fixed = compactor.tokens(messages)
        if tools:
            fixed += compactor.counter.count_text(tool_definitions_text(tools))
        budget = max(self.window_tokens - fixed, 0)
        summary = history.summary
        text = summary.content if summary is not None else None
        through = summary.through_seq if summary is not None else 0
        tainted = summary.tainted if summary is not None else False
        turns = turns_of(history.entries)
        tracer = Tracer.of(self._trace_store, state)
        async with tracer.span("memory", "memory.session") as span:
            plan = compactor.plan(budget, text, turns)
            keep, omitted = plan.keep, 0
            if plan.fold:
                folded = await self._compact(
                    tracer, span.span_id, state.session_id, text, tainted, plan.fold
                )
                if folded is None:
                    omitted = len(plan.fold)
                else:
                    text, through, tainted = folded.content, folded.through_seq, folded.tainted
            keep, dropped = self._fit(budget, text, keep)
            omitted += dropped
            prefix = history_messages(text, keep, omitted=omitted, summary_tainted=tainted)
            messages[len(messages) - 1 : len(messages) - 1] = prefix
            span.attributes.update(
                window_tokens=self.window_tokens,
                budget_tokens=budget,
                history_tokens=compactor.tokens(prefix),
                turns_sent=len(keep),
                turns_omitted=omitted,
                summary_through_seq=through or None,
            )
        if tainted or any(turn.tainted for turn in keep):
            await context.taint(
                "session", reason="the session's history holds content from tainted tasks"
            )

    async def compact(
        self, session_id: str, tracer_of: Callable[[str], Awaitable[Tracer]]
    ) -> SessionSummary | None:
        """Fold every turn the latest summary does not cover into a new summary, now.

        What a host's "compact" command does (a task's ``prepare`` folds only what does not
        fit). The ``memory.compaction`` span goes to the tracer ``tracer_of`` gives for the
        newest turn's task, whose id the summary carries too. Returns the stored summary, or
        ``None`` when every turn is summarized already.

        Raises:
            ModelError: The summary call failed (nothing is stored; the history is unchanged).
        """
        history = await self.store.history(session_id)
        turns = turns_of(history.entries)
        if not turns:
            return None
        summary = history.summary
        return await self._compact(
            await tracer_of(turns[-1].task_id),
            None,
            session_id,
            summary.content if summary is not None else None,
            summary.tainted if summary is not None else False,
            turns,
            requested=True,
        )

    async def _compact(
        self,
        tracer: Tracer,
        parent_span_id: str | None,
        session_id: str,
        previous: str | None,
        tainted: bool,
        fold: list[SessionTurn],
        *,
        requested: bool = False,
    ) -> SessionSummary | None:
        """Summarize ``fold`` into the previous summary and store it.

        When a task's start needed it, a failed summary call is logged and gives ``None``;
        when ``requested`` (``compact``), it is raised.
        """
        async with tracer.span(
            "memory", "memory.compaction", parent_span_id=parent_span_id
        ) as span:
            span.attributes.update(
                folded_turns=len(fold),
                folded_through_seq=fold[-1].last_seq,
                tokens_before=self.compactor.tokens(
                    [*([summary_message(previous)] if previous else []), *_messages(fold)]
                ),
                requested=requested,
            )
            try:
                made = await self.compactor.summarize(previous, fold)
            except CoreAgentError as exc:
                span.error = f"{type(exc).__name__}: {exc}"
                if requested:
                    raise
                # Memory helps a task; it is not worth failing one for.
                span.attributes["fallback"] = "left the oldest turns out of this task's prompt"
                log.warning(
                    "task %s: summarizing session %s failed, its oldest %d turns are left out: %s",
                    tracer.task_id,
                    session_id,
                    len(fold),
                    exc,
                )
                return None
            span.tokens_in = made.usage.input_tokens
            span.tokens_out = made.usage.output_tokens
            span.cost_usd = made.usage.cost_usd
            summary = SessionSummary(
                session_id=session_id,
                through_seq=fold[-1].last_seq,
                content=made.text,
                task_id=tracer.task_id,
                tainted=tainted or any(turn.tainted for turn in fold),
                usage=made.usage,
                created_at=datetime.now(UTC),
            )
            await self.store.save_summary(summary)
            span.attributes.update(
                calls=made.calls, summary_tokens=self.compactor.counter.count_text(made.text)
            )
            span.attributes.update(usage_attributes(made.usage))
            if tracer.content:
                span.attributes["summary"] = tracer.text(made.text)
            return summary

    def _fit(
        self, budget: int, summary: str | None, turns: list[SessionTurn]
    ) -> tuple[list[SessionTurn], int]:
        """The newest of ``turns`` that fit with the summary, and how many were left out.

        Folding leaves room for the kept turns unless the model wrote a longer summary than
        asked, or the task's own opening leaves little room.
        """
        compactor = self.compactor
        size = compactor.tokens([summary_message(summary)]) if summary else 0
        sizes = [compactor.tokens(turn.messages) for turn in turns]
        start = 0
        while start < len(turns) and size + sum(sizes[start:]) > budget:
            start += 1
        return turns[start:], start

    async def record(self, state: TaskState, context: ExecutionContext, result: TaskResult) -> None:
        """Append the ended task's turn to its session's history (nothing if it has not ended)."""
        if not result.status.is_terminal:
            return
        messages = turn_messages(
            state.request.task,
            context.run.messages,
            output=result.output,
            status=result.status.value,
            error=result.error,
            result_chars=self._result_chars,
            secrets=self._secrets,
        )
        await self._append(state, messages, tainted=context.run.tainted)

    async def record_ended_unrun(
        self, state: TaskState, status: TaskStatus, error: str | None
    ) -> None:
        """Append the turn of a task ended where it was not running.

        A task canceled while queued, waiting for a human or left by a dead process, or
        failed by recovery (``AGENT_RECOVERY=fail``): its message and how it ended, so the
        session's next task knows it was asked and not answered. The calls its run made are
        not in the turn (its messages are its executor's, in its checkpoints). Nothing for a
        nested task (its parent's turn holds it) or one that has not ended.
        """
        if not status.is_terminal or state.request.parent is not None:
            return
        messages = turn_messages(
            state.request.task,
            [],
            output=None,
            status=status.value,
            error=error,
            result_chars=self._result_chars,
            secrets=self._secrets,
        )
        await self._append(state, messages, tainted=False)

    async def _append(
        self, state: TaskState, messages: list[ChatMessage], *, tainted: bool
    ) -> None:
        try:
            await self.store.append_turn(
                state.session_id,
                state.task_id,
                messages,
                tainted=tainted,
                at=datetime.now(UTC),
            )
        except CoreAgentError as exc:
            # The task has ended and its result stands; only the next task's context is less.
            log.warning(
                "task %s ended but its turn was not added to session %s: %s",
                state.task_id,
                state.session_id,
                exc,
            )


def _messages(turns: Sequence[SessionTurn]) -> list[ChatMessage]:
    return [message for turn in turns for message in turn.messages]
