"""Forking a task at a step: a new task that starts from the original's conversation there.

The fork is a new task (``forked_from`` and ``fork_step`` in its request's metadata) whose
log begins with a copy of the original's events up to the step, so its replay shows where
it came from and ``diff`` finds where the two part. Its conversation is rebuilt from those
events (the system prompt, the user's task, each model turn and each tool result as the
model was shown it) and saved as the task's checkpoint; the current kernel then resumes it
from there, live: another model (``model``) or system prompt may carry it on. A model turn
whose calls were not all done at the step has the rest run first, as a resumed task would.

Only ReAct tasks fork (a plan's steps are separate conversations). What the events do not
hold is not rebuilt: a session's earlier turns, recalled memories, the kernel's notices to
the model, and a response model (the fork answers in text).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from core_agent.agent_files import AgentDefinition
from core_agent.contracts.approval_gateway import ApprovalCallback
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool
from core_agent.contracts.untrusted import UNTRUSTED_NOTICE
from core_agent.kernel.business_capabilities import BusinessCapabilities
from core_agent.kernel.nested_agents import Delegate
from core_agent.kernel.task_events import now
from core_agent.kernel.task_references import find_task_id
from core_agent.observability.tracer import new_trace_id
from core_agent.orchestration.cut_answer import CutAnswer, was_cut
from core_agent.orchestration.loop_journal import LoopCheckpoint, LoopJournal
from core_agent.orchestration.react_executor import CHECKPOINT_KEY
from core_agent.orchestration.react_loop import GO_ON_NOTICE, spotlight
from core_agent.replay.replay_container import replay_container
from core_agent.replay.task_export import IMPORTED
from core_agent.replay.trajectory import build_trajectory
from shared.agent_protocol import (
    AgentHandoff,
    ApprovalRequested,
    ApprovalResolved,
    AssistantMessage,
    ChatMessage,
    InjectionSuspected,
    LLMCompleted,
    PolicyDecided,
    SystemMessage,
    TaskEvent,
    TaskQueued,
    TaskResult,
    TaskState,
    TaskStatus,
    TaskTainted,
    TokenUsage,
    ToolCall,
    ToolCompleted,
    ToolHookApplied,
    ToolMessage,
    ToolResult,
    ToolStarted,
    UserMessage,
)

_NOT_COPIED = frozenset(
    {
        "task.queued",
        "task.waiting_approval",
        "task.resumed",
        "task.succeeded",
        "task.failed",
        "task.canceled",
    }
)
"""The fork has its own beginning and end, and waits for its own humans."""


class ForkResult(BaseModel):
    """The fork: its task, the step it left the original at, and how it ended."""

    model_config = ConfigDict(frozen=True)

    original_task_id: str
    task_id: str
    fork_step: int
    copied_events: int
    result: TaskResult


@dataclass(slots=True)
class _Conversation:
    """The conversation rebuilt from a run's events, and where its last turn stands."""

    messages: list[ChatMessage]
    turns: int = 0
    tool_calls: int = 0
    phase: Literal["model", "tools"] = "model"
    pending: list[ToolCall] = field(default_factory=list)
    finished: dict[int, ToolResult] = field(default_factory=dict)
    cut: CutAnswer = field(default_factory=CutAnswer)
    """An answer cut off by the token limit that the model was asked to go on with."""


def _call_id(event: TaskEvent) -> str | None:
    """The tool call an event belongs to, if any."""
    if isinstance(event, ToolStarted):
        return event.tool_call.id
    if isinstance(event, ToolCompleted):
        return event.result.call_id
    if isinstance(event, ApprovalRequested):
        call = event.request.tool_call
        return call.id if call is not None else None
    if isinstance(
        event, PolicyDecided | ToolHookApplied | InjectionSuspected | TaskTainted | AgentHandoff
    ):
        return event.call_id
    return None


def inherited_events(events: Sequence[TaskEvent], through_seq: int) -> list[TaskEvent]:
    """The events a fork copies: up to ``through_seq``, without calls left unfinished there.

    A call of the last model turn cut at the step (started, perhaps judged, but with no
    result yet) runs again in the fork from its start, so none of its events are copied: it
    would be judged twice. (Earlier turns ended before the next model turn began.)
    """
    kept = [e for e in events if e.seq <= through_seq and e.kind not in _NOT_COPIED]
    last_turn = max((n for n, e in enumerate(kept) if isinstance(e, LLMCompleted)), default=0)
    tail = kept[last_turn:]
    started = {e.tool_call.id for e in tail if isinstance(e, ToolStarted)}
    unfinished = started - {e.result.call_id for e in tail if isinstance(e, ToolCompleted)}
    dropped = {
        e.request.request_id
        for e in tail
        if isinstance(e, ApprovalRequested) and _call_id(e) in unfinished
    }
    return kept[:last_turn] + [
        e
        for e in tail
        if _call_id(e) not in unfinished
        and not (isinstance(e, ApprovalResolved) and e.decision.request_id in dropped)
    ]


def rebuild_conversation(system: str, task: str, events: Sequence[TaskEvent]) -> _Conversation:
    """The messages the model was shown, from a ReAct run's events.

    Tool results come in the order of the calls (as the loop appends them), untrusted ones
    marked as the loop marks them.

    An answer the token limit cut off is followed by the loop's request to go on, and its
    text kept as the loop keeps it (``CutAnswer``).

    Raises:
        UsageError: The events end with the model's answer: there is nothing to carry on.
    """
    conversation = _Conversation([SystemMessage(content=system), UserMessage(content=task)])
    # Each model turn with the results of its calls and the injection warnings about them
    # (by call id within the turn: some servers number calls anew every turn).
    turns: list[tuple[LLMCompleted, dict[str, ToolCompleted], dict[str, list[str]]]] = []
    for event in events:
        if isinstance(event, LLMCompleted):
            turns.append((event, {}, {}))
        elif isinstance(event, ToolCompleted) and turns:
            turns[-1][1][event.result.call_id] = event
        elif isinstance(event, InjectionSuspected) and turns:
            turns[-1][2][event.call_id] = list(event.signals)
    if not turns:
        return conversation
    for turn, results, signals in turns[:-1]:
        _add_turn(conversation, turn)
        _add_results(conversation, turn.message, results, signals)
    turn, results, signals = turns[-1]
    _add_turn(conversation, turn)
    last = turn.message
    conversation.turns = len(turns)
    if was_cut(turn.finish_reason, bool(last.tool_calls)):
        return conversation  # the model goes on with its cut answer
    if not last.tool_calls:
        raise UsageError("the step is at or after the model's answer: fork at an earlier step")
    finished = {
        index: _shown(call, results[call.id], signals)
        for index, call in enumerate(last.tool_calls)
        if call.id in results
    }
    if len(finished) == len(last.tool_calls):
        _add_results(conversation, last, results, signals)
    else:
        conversation.tool_calls += len(finished)
        conversation.phase = "tools"
        conversation.pending = list(last.tool_calls)
        conversation.finished = finished
    return conversation


def _add_turn(conversation: _Conversation, turn: LLMCompleted) -> None:
    """A model turn as the loop added it: a cut answer with the request to go on."""
    message = turn.message
    conversation.messages.append(message)
    cut = conversation.cut
    thought = bool(message.reasoning) or turn.reasoning_opened_in_prompt
    cut.settle(thought=thought, opened_in_prompt=turn.reasoning_opened_in_prompt)
    if was_cut(turn.finish_reason, bool(message.tool_calls)):
        cut.keep(message.content or "", thought=thought)
        conversation.messages.append(UserMessage(content=GO_ON_NOTICE))
    elif message.tool_calls:
        cut.clear()


def _shown(call: ToolCall, done: ToolCompleted, signals: dict[str, list[str]]) -> ToolResult:
    """The result as the model read it (untrusted output inside its marked block)."""
    result = done.result
    if done.untrusted:
        marked = spotlight(call, result.content, signals.get(call.id, ()))
        return result.model_copy(update={"content": marked})
    return result


def _add_results(
    conversation: _Conversation,
    turn: AssistantMessage,
    results: dict[str, ToolCompleted],
    signals: dict[str, list[str]],
) -> None:
    for call in turn.tool_calls:
        done = results.get(call.id)
        if done is None:
            continue
        shown = _shown(call, done, signals)
        conversation.messages.append(
            ToolMessage(
                tool_call_id=call.id, name=call.name, content=shown.content, is_error=shown.is_error
            )
        )
        conversation.tool_calls += 1


async def fork_task(
    reference: str,
    at: int,
    *,
    settings: AgentSettings | None = None,
    model: str | None = None,
    system_prompt: str | None = None,
    tools: Iterable[ITool] = (),
    deps: object = None,
    agent: AgentDefinition | str | os.PathLike[str] | None = None,
    approval_callback: ApprovalCallback | None = None,
    agents: Iterable[Delegate] = (),
) -> ForkResult:
    """Fork the task ``reference`` at step ``at`` (as ``replay`` numbers it) and run it on.

    ``model`` and ``system_prompt`` replace the configured model and the task's system
    prompt for the fork; ``settings``, ``tools``, ``deps`` and ``agent`` configure the kernel
    as for ``create_kernel``, ``agents`` are the nested agents (and teams) the task may call
    as tools (as ``agent_as_tool`` took them; they run live, as the fork does), and
    ``approval_callback`` answers the fork's risky calls (they wait for ``resolve`` without
    one).

    Raises:
        TaskNotFoundError: ``reference`` names no task.
        UsageError: The task did not run as one ReAct conversation, ``at`` is not one of its
            steps, or it is at or after the answer; an agent names a tool the kernel lacks.
    """
    changes = {"model": model} if model else {}
    container = replay_container(settings, tools=tools, deps=deps, agent=agent, **changes)
    kernel = container.kernel()
    kernel.set_approval_callback(approval_callback)
    tasks = container.redacted_task_store()
    async with kernel:
        # Inside, so a refused agent closes the stores with the kernel (recovery is off: no
        # task of theirs is carried on at entry).
        for delegate in agents:
            kernel.agent_as_tool(delegate)
        original = await tasks.get_task(await find_task_id(tasks, reference))
        events = list(await tasks.list_events(original.task_id))
        spans = await container.redacted_trace_store().list_spans(task_id=original.task_id)
        steps = build_trajectory(original, events, spans).steps
        if original.strategy != "react" or any(
            s.kind in ("plan", "plan_step", "fallback") for s in steps
        ):
            raise UsageError(
                f"task {original.task_id} ran {original.strategy or 'no strategy'}: only a "
                "ReAct task is one conversation to fork"
            )
        if not 1 <= at <= len(steps):
            raise UsageError(f"task {original.task_id} has steps 1 to {len(steps)}, not {at}")
        sources = [s.source for s in steps[:at] if s.source.startswith("event ")]
        through = int(sources[-1].removeprefix("event ")) if sources else 0
        copied = inherited_events(events, through)
        request = original.request
        system = system_prompt or request.system_prompt or container.prompts().render("system")
        instructions = BusinessCapabilities(container.capabilities()).instructions()
        if instructions:
            system = f"{system}\n\n{instructions}"
        # As the kernel composes it (``AgentKernel._context``): the notice always follows.
        conversation = rebuild_conversation(f"{system}\n\n{UNTRUSTED_NOTICE}", request.task, copied)
        fork_id = uuid.uuid4().hex
        metadata = {**request.metadata, "forked_from": original.task_id, "fork_step": at}
        # The configured workspace, not the recorded one: a recording (an imported file, say)
        # must not move the sandbox.
        changed: dict[str, object] = {
            "session_id": None,
            "metadata": metadata,
            "workspace_roots": None,
        }
        if system_prompt is not None:
            changed["system_prompt"] = system_prompt
        request = request.model_copy(update=changed)
        created = now()
        state = TaskState(
            task_id=fork_id,
            session_id=uuid.uuid4().hex,
            trace_id=new_trace_id(),
            status=TaskStatus.RUNNING,
            request=request,
            strategy="react",
            created_at=created,
            updated_at=created,
            # An imported task's conversation is the file's word, so untrusted from the start:
            # its pending calls and everything after them are graded as after untrusted data.
            tainted=bool(original.request.metadata.get(IMPORTED))
            or any(isinstance(e, TaskTainted) for e in copied),
        )
        log: list[TaskEvent] = [
            TaskQueued(
                event_id=uuid.uuid4().hex,
                task_id=fork_id,
                seq=1,
                occurred_at=created,
                session_id=state.session_id,
                trace_id=state.trace_id,
                request=request,
            )
        ]
        for seq, event in enumerate(copied, start=2):
            log.append(
                event.model_copy(
                    update={"event_id": uuid.uuid4().hex, "task_id": fork_id, "seq": seq}
                )
            )
        checkpoint = LoopCheckpoint(
            phase=conversation.phase,
            run_id=uuid.uuid4().hex,
            message_count=len(conversation.messages),
            turns=conversation.turns,
            usage=TokenUsage(),
            task_turns=conversation.turns,
            llm_calls=conversation.turns,
            tool_calls=conversation.tool_calls,
            tainted=state.tainted,
            pending_calls=conversation.pending,
            finished=conversation.finished,
            cut_answer=conversation.cut.answer,
            cut_pending=conversation.cut.pending,
            continuations=conversation.cut.continuations,
        )
        journal = LoopJournal(container.redacted_checkpoint_store(), fork_id, CHECKPOINT_KEY)
        async with tasks.unit_of_work():
            await tasks.insert_task(state, log)
            await journal.save(conversation.messages, checkpoint)
        # A task whose run stopped after that step, carried on as any such task is.
        result = await kernel.resume(
            fork_id, reason=f"forked from {original.task_id} at step {at}: carried on live"
        )
    return ForkResult(
        original_task_id=original.task_id,
        task_id=fork_id,
        fork_step=at,
        copied_events=len(copied),
        result=result,
    )
