"""Running a workflow as a kernel task: the ``workflow`` strategy's executor.

A workflow task is an ordinary task (same states, events, spans, approvals, cancel, lease and
recovery) whose executor runs the graph layer by layer (see ``graph`` for how layers are
found). Each node of a layer runs on its own deep copy of the state, at most
``max_concurrency`` at once, inside a ``step`` span of its own under the run's span (so the
spans of parallel nodes overlap), between a ``workflow.node_started`` and a
``workflow.node_finished`` event. When the whole layer has finished, the nodes' updates are
merged in the order the nodes were added (``state_merge``), the next nodes are chosen from the
merged state, and a ``WorkflowCheckpoint`` is saved with the layer's finished events and the
next layer's started events in one unit of work (the checkpoint first: finished events are
never recorded without it): one commit per layer, and a node's start is
published (after it is stored) before the node runs. A run's first unit saves the checkpoint
it starts from, so every workflow task has one, also when its first layer fails.

Policies:

- **A node fails** (raises anything but an interruption (``is_interruption``: a cancel,
  Ctrl-C), ``SystemExit`` and other ``BaseException`` subclasses included, and a
  ``CancelledError`` of its own when nothing canceled the task; returns something that is
  not an update, or a value that cannot be JSON text; or its child task does not succeed):
  the layer's other nodes are canceled, nothing of the layer is merged or saved, and the
  task fails with ``WorkflowNodeError``. Its checkpoint still holds the state of the last
  completed layer (or the one it started from): that is the rollback of seed 001 §6.2.
  ``workflow_snapshot`` reads it and ``rerun_workflow`` carries on from it in a new task. A
  cancel of the task gives each node of the running layer a ``node_finished`` (not
  succeeded) too.
- **A jump** (a ``Next``, or a back edge of the graph, i.e. a loop: see ``graph``) replaces
  the jumping node's other edges and routes (a node taking several edges back jumps to each
  of them), and ends the current pass: the run goes on with a new pass from every target
  the layer's nodes jumped to, and from every node the old pass
  had chosen and not run yet (the nodes the layer's other nodes chose included). So a loop in
  one parallel branch does not drop its siblings, and a join after both still waits for
  both; several nodes looping in one layer all go round. Every node's state update is merged
  either way.
- **Agent and sub-workflow nodes** run as child tasks of the workflow task, as nested agents
  do (``kernel.nested_agents``): the child's request names the workflow task as its parent
  (depth counted against ``AGENT_MAX_AGENT_DEPTH``), a stream of the workflow task carries
  the child's events one level down, and a cancel of the workflow task cancels it. Its id
  follows from the workflow task, the layer and the node, so a resumed workflow finds a
  child it had started: a finished child's answer is reused, an unfinished one is resumed
  (or waited for). A child waiting for a human keeps the node (and the workflow task, which
  stays ``running``) waiting until it is decided, by the kernel's approver or
  ``resolve_approval``. Its usage is added to the workflow task's once, when it ends.
- **A crash** (the process killed): the task is recovered like any other; the run goes on
  from the last completed layer, which is not run again.
"""

from __future__ import annotations

import graphlib
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
from pydantic import BaseModel, ValidationError

from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.errors import (
    CorruptStateError,
    DefinitionNotLoadedError,
    RunError,
    ToolExecutionError,
    UsageError,
    described,
    exception_leaves,
    is_interruption,
    validation_problems,
)
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.contracts.trace_store import ITraceStore
from core_agent.observability.tracer import OpenSpan, Tracer
from core_agent.workflows.checkpoint import CHECKPOINT_KEY, WorkflowCheckpoint
from core_agent.workflows.errors import WorkflowNodeError
from core_agent.workflows.graph import (
    AgentNode,
    FunctionNode,
    Next,
    Pass,
    SubworkflowNode,
    Workflow,
)
from core_agent.workflows.registry import registered
from core_agent.workflows.state_data import (
    StateDataError,
    host_data,
    json_data,
    load_state,
    state_data,
    text_state,
)
from core_agent.workflows.state_merge import merge_layer, node_updates
from shared.agent_protocol import (
    ParentTask,
    StrategyMode,
    TaskRequest,
    TaskResult,
    TaskStatus,
    TokenUsage,
    WorkflowNodeFinished,
    WorkflowNodeStarted,
)

if TYPE_CHECKING:
    from core_agent.kernel.agent_kernel import AgentKernel

log = logging.getLogger(__name__)

WORKFLOW_METADATA = "workflow"
"""The request metadata key naming a workflow task's workflow: ``name``, ``version``,
``shape``, the initial state as JSON text (``state_json``: see ``state_data``; ``state``, JSON
data, in tasks started before), and ``from`` (a task whose checkpoint a rerun starts from)."""


def request_state(spec: dict[str, Any]) -> Any:
    """The initial state data a workflow request's ``spec`` carries (``None``: none)."""
    text = spec.get("state_json")
    if isinstance(text, str):
        return text_state(text)
    return spec.get("state")


def workflow_identity(request: TaskRequest) -> tuple[str, int, str | None]:
    """The name, version and shape (``Workflow.shape``) of the workflow a task runs.

    Raises:
        UsageError: The request does not name one (a task not started by ``run_workflow``).
    """
    spec = request.metadata.get(WORKFLOW_METADATA)
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise UsageError(
            "a workflow task's request names its workflow in metadata['workflow']: start "
            "workflows with core_agent.workflows.run_workflow"
        )
    shape = spec.get("shape")
    return spec["name"], int(spec.get("version", 1)), shape if isinstance(shape, str) else None


@dataclass(slots=True)
class _Walk:
    """Where a run is in its pass: the DAG, its sorter, the nodes resolved and chosen."""

    plan: Pass
    sorter: graphlib.TopologicalSorter[str]
    resolved: set[str]
    chosen: set[str]

    @classmethod
    def of(cls, workflow: Workflow[Any], position: WorkflowCheckpoint) -> _Walk:
        """The pass ``position`` is in, with its nodes resolved and chosen so far."""
        plan = workflow.pass_from(position.pass_start, *position.pass_also)
        sorter = graphlib.TopologicalSorter(plan.predecessors)
        sorter.prepare()
        return cls(plan, sorter, set(position.resolved), set(position.chosen))


@dataclass(slots=True)
class _NodeResult:
    updates: dict[str, Any]
    jump: Next | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)


class WorkflowExecutor(IExecutor):
    """The ``workflow`` strategy: runs a registered workflow's graph (see the module).

    ``checkpoints`` keep each task's ``WorkflowCheckpoint``; ``trace_store`` gets the node
    spans. Agent and sub-workflow nodes run as child tasks (``nested_agents``) of the
    workflow task on the kernel given to ``attach`` (``create_kernel`` attaches it).
    """

    def __init__(
        self,
        *,
        checkpoints: ICheckpointStore,
        trace_store: ITraceStore,
    ) -> None:
        self._checkpoints = checkpoints
        self._trace_store = trace_store
        self._kernel: AgentKernel | None = None

    def attach(self, kernel: AgentKernel) -> None:
        """Run child tasks (agent and sub-workflow nodes) on ``kernel``."""
        self._kernel = kernel

    @property
    def strategy(self) -> StrategyMode:
        """Always ``workflow``."""
        return "workflow"

    @property
    def kernel(self) -> AgentKernel:
        """The kernel child tasks run on.

        Raises:
            RunError: None was attached (a kernel not built by ``create_kernel``).
        """
        if self._kernel is None:
            raise RunError("agent and workflow nodes need a kernel built by create_kernel")
        return self._kernel

    def check_resumable(self, request: TaskRequest) -> None:
        """Raise ``DefinitionNotLoadedError`` unless the task's workflow is registered here."""
        registered(*workflow_identity(request))

    async def checkpoint(self, task_id: str) -> WorkflowCheckpoint | None:
        """The last checkpoint of workflow task ``task_id`` (``None`` before its first layer).

        Raises:
            CorruptStateError: What is stored is not a workflow checkpoint.
        """
        return await self._checkpoints.load(task_id, CHECKPOINT_KEY, WorkflowCheckpoint)

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Run the task's workflow from its start, its checkpoint, or a rerun's source.

        Raises:
            WorkflowNodeError: A node failed (the checkpoint keeps the last good layer).
            CorruptStateError: The checkpoint cannot be read, or was written for another
                version of the workflow.
            RunError: The workflow is not registered in this process.
        """
        try:
            workflow = registered(*workflow_identity(context.task.request))
        except (DefinitionNotLoadedError, UsageError) as exc:
            raise RunError(str(exc)) from exc
        position = await self._restore(context, workflow)
        return await _WorkflowRun(self, context, workflow, position).run()

    async def _restore(
        self, context: ExecutionContext, workflow: Workflow[Any]
    ) -> WorkflowCheckpoint:
        task_id = context.task.task_id
        spec: dict[str, Any] = context.task.request.metadata[WORKFLOW_METADATA]
        saved = await self.checkpoint(task_id) if context.run.resuming else None
        source = spec.get("from")
        if saved is None and source is not None:
            saved = await self.checkpoint(str(source))
            if saved is None:
                raise CorruptStateError(
                    str(source), f"workflow task {source} has no checkpoint to rerun from"
                )
            saved = saved.model_copy(update={"finished": False, "usage": TokenUsage()})
            if request_state(spec) is not None:
                saved = saved.model_copy(update={"state": request_state(spec)})
        if saved is None:
            return WorkflowCheckpoint(
                workflow=workflow.name,
                workflow_version=workflow.version,
                shape=workflow.shape,
                state=request_state(spec) or {},
                layers=0,
                pass_start=workflow.entry,
                chosen=[workflow.entry],
            )
        if saved.workflow != workflow.name or saved.workflow_version != workflow.version:
            raise CorruptStateError(
                task_id,
                f"the checkpoint was written by workflow {saved.workflow!r} version "
                f"{saved.workflow_version}, not {workflow.name!r} version {workflow.version}",
            )
        if saved.shape is not None and saved.shape != workflow.shape:
            raise CorruptStateError(
                task_id,
                f"the checkpoint was written by another definition of workflow "
                f"{workflow.name!r} version {workflow.version} (its nodes, edges or state "
                "fields changed since): give the changed workflow another version",
            )
        stats = context.run.stats
        if saved.usage.input_tokens + saved.usage.output_tokens > (
            stats.usage.input_tokens + stats.usage.output_tokens
        ):
            stats.usage = saved.usage
        return saved

    async def save(self, context: ExecutionContext, checkpoint: WorkflowCheckpoint) -> None:
        """Persist ``checkpoint`` (in the caller's unit of work)."""
        await self._checkpoints.save(context.task.task_id, CHECKPOINT_KEY, checkpoint)


class _WorkflowRun:
    """One run of a workflow task, from ``position`` to its end (see the module)."""

    def __init__(
        self,
        executor: WorkflowExecutor,
        context: ExecutionContext,
        workflow: Workflow[Any],
        position: WorkflowCheckpoint,
    ) -> None:
        self._executor = executor
        self._context = context
        self._workflow = workflow
        self._position = position
        self._tracer = Tracer.of(executor._trace_store, context.task)
        self._order = workflow.order
        try:
            self._state: BaseModel = load_state(workflow.state_type, position.state)
        except ValidationError as exc:
            raise CorruptStateError(
                context.task.task_id,
                f"the workflow state to start from is not a valid "
                f"{workflow.state_type.__name__}: {validation_problems(exc)}",
            ) from exc

    async def run(self) -> ExecutionOutcome:
        position = self._position
        walk = _Walk.of(self._workflow, position)
        layer = [] if position.finished else self._next_layer(walk)
        # The run's first unit of work: the task's own checkpoint of where it starts (a run
        # that fails in its first layer has one to rerun from) and the first layer's
        # node_started events, published before its nodes start.
        if not position.finished and not layer:
            position = self._finished(position, walk)
        async with self._context.unit_of_work():
            await self._executor.save(self._context, position)
            await self._started(layer, position.layers)
        while layer:
            position, walk, layer = await self._run_layer(position, walk, layer)
        self._position = position
        return ExecutionOutcome(
            output=self._state.model_dump_json(by_alias=True),
            structured=host_data(position.state),
        )

    def _finished(self, position: WorkflowCheckpoint, walk: _Walk) -> WorkflowCheckpoint:
        return position.model_copy(
            update={
                "finished": True,
                "resolved": sorted(walk.resolved, key=self._order.__getitem__),
                "chosen": [],
            }
        )

    async def _started(self, layer: list[str], number: int) -> None:
        for name in layer:
            await self._context.emit(WorkflowNodeStarted, node=name, layer=number)

    def _next_layer(self, walk: _Walk) -> list[str]:
        """The next layer: ready nodes that were chosen; ready ones nobody chose are skipped."""
        layer: list[str] = []
        sorter, resolved, chosen = walk.sorter, walk.resolved, walk.chosen
        while True:
            progressed = False
            for name in sorter.get_ready():
                if name in resolved:
                    sorter.done(name)  # done before a restart
                    progressed = True
                elif name in chosen:
                    layer.append(name)
                else:
                    resolved.add(name)  # skipped: no predecessor chose it
                    sorter.done(name)
                    progressed = True
            if not progressed:
                return sorted(layer, key=self._order.__getitem__)

    async def _run_layer(
        self, position: WorkflowCheckpoint, walk: _Walk, layer: list[str]
    ) -> tuple[WorkflowCheckpoint, _Walk, list[str]]:
        """Run one layer (its node_started events are out), merge it, choose what follows.

        Saves the checkpoint after it with its node_finished events and the next layer's
        node_started events, in one unit of work: one commit per layer, and a node's start
        is published before it starts. Returns the checkpoint, the pass and the next layer
        (empty when the run has finished).
        """
        workflow = self._workflow
        number = position.layers
        if number >= workflow.max_layers:
            await self._fail(
                {
                    layer[0]: WorkflowNodeError(
                        f"workflow {workflow.name!r} ran {number} layers (max_layers): a loop "
                        "that does not end?",
                        node=layer[0],
                        layer=number,
                    )
                },
                number,
                layer,
            )
        # A layer of functions only is one unit of work: its spans, its finished events,
        # its checkpoint and the next layer's started events commit once. A layer with
        # child tasks commits around them instead, so a child's own writes (and a human it
        # waits for) are never held back by the layer's unit.
        quick = all(workflow.spec(name).kind == "function" for name in layer)
        async with self._context.unit_of_work() if quick else nullcontext():
            return await self._layer_in_unit(position, walk, layer)

    async def _layer_in_unit(
        self, position: WorkflowCheckpoint, walk: _Walk, layer: list[str]
    ) -> tuple[WorkflowCheckpoint, _Walk, list[str]]:
        workflow, context = self._workflow, self._context
        number = position.layers
        results: dict[str, _NodeResult] = {}
        failures: dict[str, BaseException] = {}
        limiter = anyio.CapacityLimiter(workflow.max_concurrency)
        given = self._state

        async def run_node(name: str) -> None:
            async with limiter:
                try:
                    results[name] = await self._run_node(name, given, number, position.data)
                except BaseException as exc:
                    # A node's SystemExit or other BaseException is its failure too: let
                    # through, it would reach the task as a cancel nobody asked for.
                    if is_interruption(exc):
                        raise
                    failures[name] = _own_cancel(exc, name, number) or exc
                    group.cancel_scope.cancel()  # the layer fails: stop its other nodes

        try:
            async with anyio.create_task_group() as group:
                for name in layer:
                    group.start_soon(run_node, name)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._canceled(layer, number, results)
            raise
        if not failures:
            # A node that raised CancelledError itself (something it awaited was canceled,
            # not the task): the task group takes it for a cancel and ends it with no result.
            for name in layer:
                if name not in results:
                    failures[name] = _cancel_failure(name, number)
        if failures:
            await self._fail(failures, number, layer)
        writes = [(name, results[name].updates) for name in layer]
        try:
            self._state = merge_layer(given, number, writes, workflow.reducers)
        except WorkflowNodeError as exc:
            await self._fail({exc.node: exc}, number, layer)
        added = sum((results[name].usage for name in layer), start=TokenUsage())
        # Only the checkpoint's count: the task's own got each child's as it ended.
        usage = position.usage + added
        # Each node hands over by its Next, else by the edges and routes it takes; one that
        # takes edges back (a loop) hands over to those nodes only, as a Next would.
        jumps: dict[str, list[Next]] = {n: [r.jump] for n in layer if (r := results[n]).jump}
        picked: list[str] = []
        try:
            for name in layer:
                if name in jumps:
                    continue
                chosen = workflow.successors(name, self._state, number)
                back = [t for t in chosen if (name, t) in walk.plan.back_edges]
                if back:
                    jumps[name] = [Next(target) for target in back]  # jumps without data
                else:
                    picked.extend(chosen)
        except WorkflowNodeError as exc:
            self._state = given  # nothing of the layer is kept
            await self._fail({exc.node: exc}, number, layer)
        try:
            data = state_data(self._state)
        except StateDataError as exc:
            self._state = given  # nothing of the layer is kept
            writers = [n for n in layer if exc.fields & results[n].updates.keys()] or layer
            by = ", ".join(map(repr, writers))
            failure = WorkflowNodeError(f"{exc} (written by {by})", node=writers[0], layer=number)
            await self._fail({writers[0]: failure}, number, layer)
        if jumps:
            # A new pass, from every jump's target and every node this pass had chosen and
            # not run yet: a loop in one branch does not drop its siblings' nodes.
            following = self._after_jumps(position, walk, layer, jumps, picked, data, usage)
            walk = _Walk.of(workflow, following)
            upcoming = self._next_layer(walk)
        else:
            walk.sorter.done(*layer)
            walk.resolved.update(layer)
            walk.chosen.update(picked)
            upcoming = self._next_layer(walk)
            following = position.model_copy(
                update={
                    "state": data,
                    "layers": number + 1,
                    "resolved": sorted(walk.resolved, key=self._order.__getitem__),
                    "chosen": sorted(walk.chosen - walk.resolved, key=self._order.__getitem__),
                    "data": {k: v for k, v in position.data.items() if k not in layer},
                    "usage": usage,
                }
            )
        if not upcoming:
            following = self._finished(following, walk)
        async with context.unit_of_work():
            # The checkpoint first: a layer whose checkpoint cannot be written fails, and its
            # nodes are never recorded as finished (succeeded) beside an older checkpoint.
            try:
                await self._executor.save(context, following)
            except ValueError as exc:  # it cannot be JSON text (state_data checks it first)
                self._state = given
                failure = WorkflowNodeError(
                    f"the checkpoint after layer {number} cannot be written: "
                    f"{type(exc).__name__}: {exc}",
                    node=layer[0],
                    layer=number,
                )
                await self._fail({layer[0]: failure}, number, layer)
            for name in layer:
                await context.emit(
                    WorkflowNodeFinished,
                    node=name,
                    layer=number,
                    succeeded=True,
                    updated=sorted(results[name].updates),
                    jump=jumps[name][0].node if name in jumps else None,
                )
            await self._started(upcoming, number + 1)
        return following, walk, upcoming

    def _after_jumps(
        self,
        position: WorkflowCheckpoint,
        walk: _Walk,
        layer: list[str],
        jumps: dict[str, list[Next]],
        picked: list[str],
        state: dict[str, Any],
        usage: TokenUsage,
    ) -> WorkflowCheckpoint:
        """The checkpoint of a new pass from the layer's ``jumps`` and the pending nodes."""
        order = self._order.__getitem__
        made = [jump for name in layer for jump in jumps.get(name, ())]
        targets = list(dict.fromkeys(jump.node for jump in made))
        pending = (walk.chosen - walk.resolved - set(layer)) | set(picked)
        carried = sorted(pending - set(targets), key=order)
        data = {name: position.data[name] for name in carried if name in position.data}
        for jump in made:
            if jump.data is None:
                continue
            if jump.node in data and data[jump.node] != jump.data:
                log.warning(
                    "workflow %s: two nodes jumped to %r with different data; the first "
                    "added gives it",
                    self._workflow.name,
                    jump.node,
                )
                continue
            data[jump.node] = jump.data
        return WorkflowCheckpoint(
            workflow=self._workflow.name,
            workflow_version=self._workflow.version,
            shape=self._workflow.shape,
            state=state,
            layers=position.layers + 1,
            pass_start=targets[0],
            pass_also=[*targets[1:], *carried],
            chosen=[*targets, *carried],
            data=data,
            usage=usage,
        )

    async def _canceled(self, layer: list[str], number: int, done: dict[str, Any]) -> None:
        """Record that the task's cancel stopped the layer: each node gets its finish."""
        async with self._context.unit_of_work():
            for name in layer:
                await self._context.emit(
                    WorkflowNodeFinished,
                    node=name,
                    layer=number,
                    succeeded=False,
                    error=(
                        "not kept: the task was canceled before its layer completed"
                        if name in done
                        else "canceled: the task was canceled"
                    ),
                )

    async def _fail(
        self, failures: dict[str, BaseException], layer: int, nodes: list[str]
    ) -> NoReturn:
        """Record the layer's end and raise: the checkpoint stays at the last good layer.

        Every node of the layer gets its ``workflow.node_finished`` (not succeeded): the
        failed ones with their error, the others (canceled, or done but not merged) with the
        failure that undid them.
        """
        first = min(failures, key=self._order.__getitem__)
        exc = failures[first]
        message = (
            str(exc)
            if isinstance(exc, WorkflowNodeError)
            else f"node {first!r} failed: {described(exc)}"
        )
        async with self._context.unit_of_work():
            for name in nodes:
                failure = failures.get(name)
                await self._context.emit(
                    WorkflowNodeFinished,
                    node=name,
                    layer=layer,
                    succeeded=False,
                    error=(
                        described(failure)
                        if failure is not None
                        else f"not kept: the layer failed ({message})"
                    ),
                )
        raise WorkflowNodeError(
            f"workflow {self._workflow.name!r}, layer {layer}: {message} (the task's "
            "checkpoint keeps the state from before this layer: rerun_workflow carries on "
            "from there)",
            node=first,
            layer=layer,
        ) from exc

    async def _run_node(
        self, name: str, given: BaseModel, layer: int, data: dict[str, Any]
    ) -> _NodeResult:
        spec = self._workflow.spec(name)
        async with self._tracer.span(
            "step", f"node {name}", parent_span_id=self._context.task.parent_span_id
        ) as span:
            span.attributes.update(
                {
                    "workflow": self._workflow.name,
                    "node": name,
                    "layer": layer,
                    "node_kind": spec.kind,
                }
            )
            copy = given.model_copy(deep=True)
            body = spec.body
            usage = TokenUsage()
            if isinstance(body, FunctionNode):
                returned = await (
                    body.call(copy, data.get(name)) if body.takes_data else body.call(copy)
                )
            elif isinstance(body, AgentNode):
                returned, usage = await self._run_agent(name, body, copy, layer, span)
            else:
                returned, usage = await self._run_subworkflow(name, body, copy, layer, span)
            jump: Next | None = None
            if isinstance(returned, Next):
                jump, returned = returned, returned.update
                if jump.node not in spec.jumps:
                    raise WorkflowNodeError(
                        f"node {name!r} jumped to {jump.node!r}, which it does not declare "
                        f"(jumps={list(spec.jumps)})",
                        node=name,
                        layer=layer,
                    )
                try:  # what the target gets, now as after a restart: JSON data
                    given_data = json_data(jump.data, f"the data of {name!r}'s Next({jump.node!r})")
                except StateDataError as exc:
                    raise WorkflowNodeError(str(exc), node=name, layer=layer) from exc
                jump = Next(jump.node, given_data, jump.update)
                span.attributes["jump"] = jump.node
            if returned is not None and not isinstance(returned, dict):
                raise WorkflowNodeError(
                    f"node {name!r} returned {type(returned).__name__}: return None, a dict "
                    "of field updates, or Next(...)",
                    node=name,
                    layer=layer,
                )
            updates = node_updates(name, layer, given, copy, returned, self._workflow.reducers)
            span.attributes["updated"] = sorted(updates)
            return _NodeResult(updates, jump, usage)

    async def _run_child(
        self, name: str, layer: int, request: TaskRequest, span: OpenSpan
    ) -> TaskResult:
        """Run ``request`` as the child task of node ``name`` in ``layer`` (nested agents).

        The child names the workflow task as its parent (so a stream of the workflow carries
        its events, a cancel of the workflow reaches it, and it counts against the depth
        limit), and its id follows from the layer and node: a resumed workflow finds it
        again (reused if it ended, resumed if its process died, waited for if a human is to
        answer). Its usage is added to the workflow task's when it ends.
        """
        runs = self._executor.kernel.nested_agents
        delegate = _NodeDelegate(name, f"workflow node {name}", request)
        try:
            result = await runs.run(
                self._context,
                delegate,
                request.task,
                key=f"workflow node {layer}.{name}",
                span_id=span.span_id,
            )
        except ToolExecutionError as exc:  # refused: deeper than the depth limit
            raise WorkflowNodeError(f"node {name!r}: {exc}", node=name, layer=layer) from exc
        span.attributes["child_task_id"] = result.task_id
        return result

    async def _run_agent(
        self, name: str, body: AgentNode, state: BaseModel, layer: int, span: OpenSpan
    ) -> tuple[Any, TokenUsage]:
        result = await self._run_child(name, layer, body.request(state), span)
        if result.status is not TaskStatus.SUCCEEDED:
            raise WorkflowNodeError(
                f"agent node {name!r}: its task {result.task_id} ended "
                f"{result.status.value}: {result.error}",
                node=name,
                layer=layer,
            )
        return body.output(state, result), result.usage

    async def _run_subworkflow(
        self, name: str, body: SubworkflowNode, state: BaseModel, layer: int, span: OpenSpan
    ) -> tuple[Any, TokenUsage]:
        from core_agent.workflows.workflow_runs import workflow_request  # imports this module

        request = workflow_request(body.workflow, body.input(state))
        result = await self._run_child(name, layer, request, span)
        saved = await self._executor.checkpoint(result.task_id)
        if result.status is not TaskStatus.SUCCEEDED or saved is None:
            raise WorkflowNodeError(
                f"workflow node {name!r}: its task {result.task_id} ended "
                f"{result.status.value}: {result.error}",
                node=name,
                layer=layer,
            )
        final = load_state(body.workflow.state_type, saved.state)
        return body.output(state, final), result.usage


@dataclass(frozen=True, slots=True)
class _NodeDelegate:
    """An agent or sub-workflow node as ``NestedAgents`` runs it: its request, as built."""

    name: str
    description: str
    prepared: TaskRequest

    def request(self, task: str, *, parent: ParentTask | None = None) -> TaskRequest:
        return self.prepared.model_copy(update={"parent": parent})


def _own_cancel(exc: BaseException, node: str, layer: int) -> WorkflowNodeError | None:
    """The failure of a node that raised the runtime's cancellation on its own, saying so.

    Alone or in a group, nobody canceled its task: its type alone would read like a cancel.
    """
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        cancels, rest = exc.split(cancelled)
        if cancels is None:
            return None
        also = ""
        if rest is not None:
            also = f" with {', '.join(map(described, exception_leaves(rest)))}"
    elif isinstance(exc, cancelled):
        also = ""
    else:
        return None
    return _cancel_failure(node, layer, also)


def _cancel_failure(node: str, layer: int, also: str = "") -> WorkflowNodeError:
    return WorkflowNodeError(
        f"node {node!r} raised {anyio.get_cancelled_exc_class().__name__}{also} though nothing "
        "canceled the workflow task (was something it awaited canceled?)",
        node=node,
        layer=layer,
    )
