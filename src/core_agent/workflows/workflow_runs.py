"""Starting, resuming and rerunning workflow tasks on a kernel, and reading their state.

``run_workflow`` runs a built workflow as a kernel task (strategy ``workflow``) and returns
its final state with the task's result. A workflow task that stopped (its process died) is
carried on by the kernel's recovery, ``kernel.resume(task_id)`` or ``resume_workflow``; one
that failed keeps the state of its last completed layer, which ``workflow_snapshot`` returns
(the rollback of seed 001 §6.2) and from which ``rerun_workflow`` starts a new task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from core_agent.contracts.errors import CorruptStateError, UsageError, validation_problems
from core_agent.contracts.executor import IExecutor
from core_agent.workflows.state_data import (
    StateDataError,
    load_state,
    state_data,
    state_text,
    survives_round_trip,
)
from core_agent.workflows.workflow_executor import (
    WORKFLOW_METADATA,
    WorkflowExecutor,
    request_state,
    workflow_identity,
)
from shared.agent_protocol import TaskRequest, TaskResult, TaskStatus

if TYPE_CHECKING:
    from core_agent.contracts.checkpoint_store import ICheckpointStore
    from core_agent.contracts.trace_store import ITraceStore
    from core_agent.kernel.agent_kernel import AgentKernel
    from core_agent.workflows.graph import Workflow

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class WorkflowResult(Generic[S]):
    """How a workflow task ended, and its state.

    ``state`` is the final state when the task succeeded; otherwise the state its checkpoint
    keeps: that of its last completed layer, or the state it started from if no layer
    completed (``None`` only if it ended before it began). ``layers`` counts the completed
    layers.
    """

    task: TaskResult
    state: S | None
    layers: int

    @property
    def status(self) -> TaskStatus:
        """The task's status."""
        return self.task.status

    @property
    def task_id(self) -> str:
        """The task's id."""
        return self.task.task_id


@dataclass(frozen=True, slots=True)
class WorkflowSnapshot(Generic[S]):
    """A workflow task's state as of its last checkpoint (its last completed layer)."""

    task_id: str
    state: S
    layers: int
    finished: bool
    next_nodes: list[str]
    """The nodes that were to run next (empty once finished)."""


def workflow_executor(kernel: AgentKernel) -> WorkflowExecutor:
    """The kernel's ``workflow`` executor.

    Raises:
        UsageError: The kernel has none (it was not built by ``create_kernel``).
    """
    executor: IExecutor | None = kernel.executor("workflow")
    if not isinstance(executor, WorkflowExecutor):
        raise UsageError("this kernel runs no workflows: build it with core_agent.create_kernel")
    return executor


def kernel_with_workflows(executor: WorkflowExecutor, **options: Any) -> AgentKernel:
    """An ``AgentKernel(**options)`` whose workflow ``executor`` runs child tasks on it."""
    from core_agent.kernel.agent_kernel import AgentKernel

    kernel = AgentKernel(**options)
    executor.attach(kernel)
    return kernel


def build_workflow_executor(
    checkpoints: ICheckpointStore, trace_store: ITraceStore
) -> WorkflowExecutor:
    """The ``workflow`` strategy's executor over the kernel's stores (for the container)."""
    return WorkflowExecutor(checkpoints=checkpoints, trace_store=trace_store)


def workflow_request(
    workflow: Workflow[S],
    state: S,
    *,
    task: str | None = None,
    session_id: str | None = None,
) -> TaskRequest:
    """The request of a task that runs ``workflow`` from ``state`` (``run_workflow``'s).

    For a host that runs it otherwise, e.g. ``kernel.stream_task(workflow_request(...))``
    to follow its events (its agent and sub-workflow nodes' come with ``depth`` 1).

    Raises:
        WorkflowDefinitionError: The graph is not valid.
        UsageError: ``state`` is not a ``workflow.state_type``, or cannot be checkpointed
            as it is (a field that is not JSON data, or would not come back the same).
    """
    workflow.build()
    if not isinstance(state, workflow.state_type):
        raise UsageError(
            f"workflow {workflow.name!r} runs over {workflow.state_type.__name__}, "
            f"not {type(state).__name__}"
        )
    return TaskRequest(
        task=task or f"workflow {workflow.name}",
        session_id=session_id,
        force_mode="workflow",
        metadata={
            WORKFLOW_METADATA: {
                "name": workflow.name,
                "version": workflow.version,
                "shape": workflow.shape,
                "state_json": _checkpointable(workflow, state),
            }
        },
    )


def _checkpointable(workflow: Workflow[S], state: S) -> str:
    """``state`` as the JSON text a request carries; ``UsageError`` if it cannot be."""
    try:
        changed = survives_round_trip(state)
        text = state_text(state_data(state))
    except (StateDataError, ValidationError) as exc:
        raise UsageError(
            f"the state of workflow {workflow.name!r} cannot be checkpointed: "
            f"{validation_problems(exc) if isinstance(exc, ValidationError) else exc}"
        ) from exc
    if changed:
        raise UsageError(
            f"the state of workflow {workflow.name!r} would not come back the same from its "
            f"checkpoint (JSON data): field(s) {', '.join(map(repr, sorted(changed)))} change "
            "in the round trip; give them types whose JSON form validates back to the value"
        )
    return text


async def run_workflow(
    kernel: AgentKernel,
    workflow: Workflow[S],
    state: S,
    *,
    task: str | None = None,
    session_id: str | None = None,
    task_id: str | None = None,
) -> WorkflowResult[S]:
    """Run ``workflow`` from ``state`` as a task of ``kernel``, to its end.

    The workflow is built (checked, registered) first if it was not. ``task`` is the task's
    text (``workflow <name>`` by default); ``session_id`` and ``task_id`` are as for
    ``execute_task``. A node failing fails the task (the result's ``state`` is then the
    last completed layer's); the task's events, spans and checkpoints are the kernel's.

    Raises:
        WorkflowDefinitionError: The graph is not valid (nothing is started).
        UsageError: ``state`` is not a ``workflow.state_type``; the kernel runs no workflows.
    """
    request = workflow_request(workflow, state, task=task, session_id=session_id)
    workflow_executor(kernel)
    result = await kernel.execute_task(request, task_id=task_id)
    return await _workflow_result(kernel, workflow, result)


async def resume_workflow(
    kernel: AgentKernel, workflow: Workflow[S], task_id: str
) -> WorkflowResult[S]:
    """Carry on workflow task ``task_id`` (its process died) from its last completed layer.

    ``kernel.resume(task_id)`` does the same, returning the task's result only.

    Raises:
        UsageError: ``task_id`` is not a task of ``workflow`` at its version; as
            ``AgentKernel.resume`` (it runs elsewhere, or already ended).
    """
    workflow.build()
    stored = await kernel.get_task(task_id)
    name, version, _ = workflow_identity(stored.request)
    if (name, version) != (workflow.name, workflow.version):
        raise UsageError(
            f"task {task_id} is a task of workflow {name!r} version {version}, not of "
            f"{workflow.name!r} version {workflow.version}"
        )
    result = await kernel.resume(task_id, reason="its workflow was resumed")
    return await _workflow_result(kernel, workflow, result)


async def rerun_workflow(
    kernel: AgentKernel,
    workflow: Workflow[S],
    task_id: str,
    *,
    state: S | None = None,
    task: str | None = None,
) -> WorkflowResult[S]:
    """Run a new task of ``workflow`` from the last checkpoint of task ``task_id``.

    For a workflow task that failed (or was canceled): the completed layers are not run
    again; the run starts with the layer that did not complete, from the state the last
    completed one left (the task's initial state, if it failed in its first layer), or from
    ``state`` (the same state, corrected) when given.

    Raises:
        UsageError: ``task_id`` is not a task of ``workflow`` (or of another version or
            definition of it), or has not ended.
    """
    workflow.build()
    stored = await kernel.get_task(task_id)
    if stored.strategy != "workflow" or workflow_identity(stored.request)[0] != workflow.name:
        raise UsageError(f"task {task_id} is not a task of workflow {workflow.name!r}")
    if not stored.status.is_terminal:
        raise UsageError(
            f"task {task_id} is {stored.status.value}: resume it (resume_workflow) instead"
        )
    _, version, shape = workflow_identity(stored.request)
    if version != workflow.version:
        raise UsageError(
            f"task {task_id} ran version {version} of workflow {workflow.name!r}, not version "
            f"{workflow.version}: its checkpoint is carried on only by the version it was "
            "written by (build that one to rerun it)"
        )
    if shape is not None and shape != workflow.shape:
        raise UsageError(
            f"task {task_id} ran a different definition of workflow {workflow.name!r} (its "
            "nodes, edges or state fields changed since): its checkpoint cannot be carried on "
            "by this one"
        )
    spec: dict[str, Any] = {
        "name": workflow.name,
        "version": workflow.version,
        "shape": workflow.shape,
    }
    if state is not None:
        spec["state_json"] = _checkpointable(workflow, state)
    if await workflow_executor(kernel).checkpoint(task_id) is not None:
        spec["from"] = task_id
    else:
        # It ended before its first checkpoint (a task started before every run saved one
        # as it began): nothing ran that counts, so the rerun starts from its initial state.
        spec["rerun_of"] = task_id
        if state is None:
            spec["state_json"] = state_text(
                request_state(stored.request.metadata[WORKFLOW_METADATA]) or {}
            )
    request = TaskRequest(
        task=task or f"workflow {workflow.name} (rerun of {task_id})",
        force_mode="workflow",
        metadata={WORKFLOW_METADATA: spec},
    )
    result = await kernel.execute_task(request)
    return await _workflow_result(kernel, workflow, result)


async def workflow_snapshot(
    kernel: AgentKernel, workflow: Workflow[S], task_id: str
) -> WorkflowSnapshot[S] | None:
    """Task ``task_id``'s state as of its last checkpoint; ``None`` before its first layer.

    For a task that failed, that is the state before the failing layer: the rollback.

    Raises:
        UsageError: The task's checkpoint was written by another workflow, or another
            version of it.
        CorruptStateError: The stored checkpoint is not a workflow's, or its state is not a
            valid ``workflow.state_type``.
    """
    saved = await workflow_executor(kernel).checkpoint(task_id)
    if saved is None:
        return None
    if (saved.workflow, saved.workflow_version) != (workflow.name, workflow.version):
        raise UsageError(
            f"task {task_id} is a task of workflow {saved.workflow!r} version "
            f"{saved.workflow_version}, not of {workflow.name!r} version {workflow.version}"
        )
    try:
        state = load_state(workflow.state_type, saved.state)
    except ValidationError as exc:
        raise CorruptStateError(
            task_id,
            f"the checkpointed state is not a valid {workflow.state_type.__name__}: "
            f"{validation_problems(exc)}",
        ) from exc
    return WorkflowSnapshot(
        task_id=task_id,
        state=state,
        layers=saved.layers,
        finished=saved.finished,
        next_nodes=[] if saved.finished else list(saved.chosen),
    )


async def _workflow_result(
    kernel: AgentKernel, workflow: Workflow[S], result: TaskResult
) -> WorkflowResult[S]:
    # The state comes from the checkpoint (the final one, when it succeeded), read as it
    # was written, NaN kept: the task's structured output is plain JSON for hosts (NaN as
    # None, see state_data.host_data).
    snapshot = await workflow_snapshot(kernel, workflow, result.task_id)
    if snapshot is None:
        return WorkflowResult(result, None, 0)
    return WorkflowResult(result, snapshot.state, snapshot.layers)
