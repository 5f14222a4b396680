"""Running a recorded task again through the current kernel, with the model played back.

The task's request goes through today's kernel (prompts, router, policy, tool validation,
the tools themselves with ``live`` tools) as a new task linked to the original by its
metadata (``replay_of``); the model is replaced by the recorded answers, in order
(``RecordedLLMGateway``), so no model is called. With ``recorded`` tools (the default) each
tool gives back the result it gave then, and humans' recorded decisions answer the same
requests; with ``live`` tools the tools run for real, and nothing a human decided then is
reused. A live call whose recorded arguments hold ``[REDACTED]`` (a secret the stores never
kept) is refused, not run with the placeholder (``LiveTool``), and the report names it.

The new run is watched step by step against the recording. At the first step that differs
(another route, call, result, policy decision or approval, or a model answer the recording
does not have) the model stops answering, so the run ends there (``failed``, with
``ReplayDivergedError``, a ``RunStoppedError`` that no strategy recovers from: no replan, no
fallback, no question for a human) instead of carrying on with answers written for another
run. Nothing of a rerun is left waiting for a human either: a decision taken later would
carry it on outside the replay, with the configured model. The report names that step and
shows a diff; the rerun reproduced the task when every step matched, down to the final answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Literal

from dependency_injector import providers
from pydantic import BaseModel, Field

from core_agent.agent_files import AgentDefinition
from core_agent.contracts.approval_gateway import ApprovalCallback
from core_agent.contracts.errors import RedactedArgumentsError, TaskFailedError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.kernel.agent_teams import TEAM_KEY
from core_agent.kernel.nested_agents import Delegate
from core_agent.kernel.response_models import response_model_for
from core_agent.kernel.task_references import find_task_id
from core_agent.replay.comparison import StepsComparison, compare_steps, same_step
from core_agent.replay.recorded_approvals import RecordedApprovalGateway
from core_agent.replay.recorded_gateway import RecordedLLMGateway
from core_agent.replay.recorded_tools import LiveToolRegistry, RecordedToolRegistry
from core_agent.replay.recording import Recording
from core_agent.replay.replay_container import replay_container
from core_agent.replay.task_export import IMPORTED
from core_agent.replay.trajectory import (
    ReplayStep,
    TrajectoryBuilder,
    build_trajectory,
    comparison_order,
)
from core_agent.safety.approval_gateway import denial
from shared.agent_protocol import (
    AgentHandoff,
    ApprovalDecision,
    ApprovalRequest,
    TaskEvent,
    TaskState,
    TaskStatus,
    ToolCompleted,
)

ToolResults = Literal["recorded", "live"]


class RerunReport(StepsComparison):
    """How a rerun went against the recording.

    ``reproduced``: every compared step matched (the final answer too), the model was asked
    nothing the recording lacks, and no call was refused for a redacted secret. Otherwise
    ``first_difference`` says where the runs parted (``a`` is the recording's side, ``b``
    the rerun's), and ``differences`` lists every difference after aligning the rest.
    """

    original_task_id: str
    rerun_task_id: str
    tool_results: ToolResults
    reproduced: bool
    status: TaskStatus
    output: str | None = None
    recorded_steps: int
    rerun_steps: int
    model_answers_replayed: int
    model_answers_recorded: int
    extra_model_call: str | None = None
    redacted_calls: list[str] = Field(default_factory=list)
    """Calls a rerun with live tools did not run, each with why: their recorded arguments
    hold ``[REDACTED]`` where a secret was (the stores never keep one), so the tool would
    have been given the placeholder. The steps from there on cannot be reproduced."""


class RerunMonitor:
    """Follows the rerun's events and notes the first step that differs from the recording.

    Checked when the model is next asked (``reason``): by then the turn before has ended,
    so its calls' steps can be put in the order comparisons use (``comparison_order``).
    """

    def __init__(self, recorded: Sequence[ReplayStep], task_id: str) -> None:
        self._recorded = list(recorded)
        self._task_id = task_id
        self._builder = TrajectoryBuilder()
        self._checked = 0
        self.divergence: str | None = None

    def __call__(self, event: BaseModel) -> None:
        """Take one published event (the event bus calls this in the publisher's task)."""
        if isinstance(event, TaskEvent) and event.task_id == self._task_id:
            self._builder.add(event)

    def reason(self) -> str | None:
        """Why the rerun no longer follows the recording; ``None`` while it does."""
        if self.divergence is not None:
            return self.divergence
        compared = comparison_order(self._builder.steps)
        for index in range(self._checked, len(compared)):
            step = compared[index]
            if index >= len(self._recorded):
                self.divergence = f"a {step.kind} step the recording does not have"
                return self.divergence
            expected = self._recorded[index]
            if not same_step(expected, step):
                self.divergence = f"step {expected.number} ({expected.kind}) differs"
                return self.divergence
        self._checked = len(compared)
        return None


def _live_approvals(callback: ApprovalCallback | None) -> ApprovalCallback:
    if callback is not None:
        return callback

    def refuse(request: ApprovalRequest) -> ApprovalDecision:
        return denial(
            request,
            "a rerun with live tools does not reuse a human's recorded approval, and no "
            "approver was given",
        )

    return refuse


def _delegations(original: TaskState, events: Sequence[TaskEvent], tools: ToolResults) -> list[str]:
    """The nested agents the task called as tools, by name, if a rerun can play them back.

    A child task's model answers are its own, not in the parent's recording: played back
    here only as the agent tool's recorded result. Live, the child would run again and ask
    the parent's recorded model for its answers, and a team's members are such children
    whatever the tools.

    Raises:
        UsageError: The task ran a team, or called nested agents and ``tools`` is live.
    """
    handoffs = [event for event in events if isinstance(event, AgentHandoff)]
    children = ", ".join(event.child_task_id for event in handoffs)
    if original.request.force_mode == "team" or original.strategy == "team":
        team = original.request.metadata.get(TEAM_KEY, "?")
        raise UsageError(
            f"task {original.task_id} ran team {team!r}: its members ran as child tasks with "
            "model answers of their own, which a rerun does not play back yet"
            + (f"; rerun them one by one ({children})" if children else "")
        )
    names = sorted({event.agent for event in handoffs if event.call_id is not None})
    if names and tools == "live":
        raise UsageError(
            f"task {original.task_id} called nested agents as tools ({', '.join(names)}): "
            "with live tools they would run again and ask for model answers of their own, "
            "which a rerun does not play back yet; rerun it with recorded tools (their "
            f"answers played back), or rerun their child tasks one by one ({children})"
        )
    return names


async def rerun_task(
    reference: str,
    *,
    settings: AgentSettings | None = None,
    tool_results: ToolResults = "recorded",
    tools: Iterable[ITool] = (),
    deps: object = None,
    agent: AgentDefinition | str | os.PathLike[str] | None = None,
    approval_callback: ApprovalCallback | None = None,
    response_model: type[BaseModel] | None = None,
    agents: Iterable[Delegate] = (),
) -> RerunReport:
    """Run the recorded task ``reference`` again through the current kernel (module docstring).

    ``settings``, ``tools``, ``deps`` and ``agent`` configure the kernel as for
    ``create_kernel``: pass the tools the task used that the host gave in code, and the
    nested agents (and teams) it called as tools (``agents``, as ``agent_as_tool`` took
    them): with recorded tools their calls give back the child's recorded answer, as any
    tool's do (the child task is not run again: rerun it by its own id). With
    ``live`` tools, calls that need a human go to ``approval_callback`` (denied when
    ``None``). A task started with a response model needs it again (``response_model``,
    unless its module is imported).

    Raises:
        TaskNotFoundError: ``reference`` names no task.
        UsageError: The task has not ended yet, or its response model is not known here; it
            called nested agents that ``agents`` lacks, or called any with ``live`` tools;
            it ran a team (``run_team``).
    """
    if tool_results not in ("recorded", "live"):
        raise UsageError(f"tool results are 'recorded' or 'live', not {tool_results!r}")

    # The router's optional model classifier would take a recorded answer meant for the task.
    container = replay_container(
        settings, tools=tools, deps=deps, agent=agent, router_classifier="deterministic"
    )
    tasks = container.redacted_task_store()
    traces = container.redacted_trace_store()
    try:
        original = await tasks.get_task(await find_task_id(tasks, reference))
        if original.status in (TaskStatus.QUEUED, TaskStatus.RUNNING):
            raise UsageError(
                f"task {original.task_id} is {original.status.value}: rerun it once it has ended"
            )
        if tool_results == "live" and original.request.metadata.get(IMPORTED):
            # Its calls and answers are the file's word: with live tools they would act here,
            # judged as if this machine's model had asked for them.
            raise UsageError(
                f"task {original.task_id} was imported: its recorded calls are not run for "
                "real; rerun it with recorded tools, or fork it (a fork of it is tainted, so "
                "risky calls are asked about)"
            )
        output_type = response_model_for(original, given=response_model, known=None)
        events = list(await tasks.list_events(original.task_id))
        spans = await traces.list_spans(task_id=original.task_id)
        recorded = build_trajectory(original, events, spans)
        delegated = _delegations(original, events, tool_results)
        recording = Recording.from_events(events)
        rerun_id = uuid.uuid4().hex
        monitor = RerunMonitor(recorded.compared, rerun_id)
        gateway = RecordedLLMGateway(recording.model_turns, stop=monitor.reason)
        container.model_gateway.override(providers.Object(gateway))
        # Every call comes from the recording: recorded results, or live tools that refuse a
        # call whose recorded arguments lost a secret to the redaction.
        registry: IToolRegistry = (
            RecordedToolRegistry(container.tool_registry(), recording)
            if tool_results == "recorded"
            else LiveToolRegistry(container.tool_registry())
        )
        container.tool_registry.override(providers.Object(registry))
        kernel = container.kernel()
        for delegate in agents:
            kernel.agent_as_tool(delegate)
        missing = [name for name in delegated if name not in registry.names()]
        if missing:
            raise UsageError(
                f"task {original.task_id} called nested agents as tools "
                f"({', '.join(missing)}), given in code: pass them again through the Python API "
                "(rerun_task(..., agents=[...]), as agent_as_tool took them); their recorded "
                "answers are played back"
            )
    except BaseException:
        await tasks.close()  # the kernel that would close them was not built
        await traces.close()
        raise
    if tool_results == "recorded":
        kernel.set_approval_gateway(RecordedApprovalGateway(recording))
    else:
        kernel.set_approval_callback(_live_approvals(approval_callback))
    metadata = {**original.request.metadata, "replay_of": original.task_id}
    metadata["replay_tools"] = tool_results
    # The configured workspace, not the recorded one: a recording (an imported file, say)
    # must not move the sandbox.
    request = original.request.model_copy(
        update={"session_id": None, "metadata": metadata, "workspace_roots": None}
    )
    subscription = kernel.event_bus.subscribe(None, monitor)
    async with kernel:
        try:
            if output_type is None:
                await kernel.execute_task(request, task_id=rerun_id)
            else:
                with suppress(TaskFailedError):  # the stored task says how it ended
                    await kernel.execute_task(request, response_model=output_type, task_id=rerun_id)
        finally:
            subscription.cancel()
        rerun = await kernel.get_task(rerun_id)
        rerun_events = await kernel.task_events(rerun_id)
        redacted = [
            f"{event.result.name} (call {event.result.call_id}): {event.result.content}"
            for event in rerun_events
            if isinstance(event, ToolCompleted)
            and event.result.error_type == RedactedArgumentsError.__name__
        ]
        rerun_spans = await kernel.task_spans(rerun_id)
        # Compared as it stopped: a recording that ended waiting for a human is reproduced
        # by a rerun that came to the same question.
        replayed = build_trajectory(rerun, rerun_events, rerun_spans)
        if not rerun.status.is_terminal:
            # Nothing of a rerun waits for a human: a decision taken later would carry it on
            # with the configured model and tools, outside this replay.
            await kernel.cancel_task(
                rerun_id, "a rerun does not wait for a human: it ended where it stopped"
            )
            rerun = await kernel.get_task(rerun_id)
    steps = compare_steps(recorded.compared, replayed.compared, a_name="recorded", b_name="rerun")
    return RerunReport(
        **dict(steps),
        original_task_id=original.task_id,
        rerun_task_id=rerun_id,
        tool_results=tool_results,
        reproduced=steps.first_difference is None and gateway.extra_call is None and not redacted,
        status=rerun.status,
        output=rerun.output,
        recorded_steps=len(recorded.compared),
        rerun_steps=len(replayed.compared),
        model_answers_replayed=gateway.calls,
        model_answers_recorded=len(recording.model_turns),
        extra_model_call=gateway.extra_call,
        redacted_calls=redacted,
    )
