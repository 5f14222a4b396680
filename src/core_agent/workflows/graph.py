"""A workflow's graph: named nodes over a typed state, the edges between them, and its checks.

A node is an async function of the state, an agent (a ``TaskRequest`` run as a child task) or
another workflow (run as a child task too). An edge may be conditional (``when``), and a route
chooses the next node(s) from the state; a node may also return ``Next("name", data)`` to jump
to a node it declared in ``jumps``. ``build`` checks the graph (unknown names, unreachable
nodes, cycles with no way out are errors; an unconditional fan-out is a warning) and registers
the workflow by name, which is how a task of it is found again after a restart.

How a built workflow runs (``workflow_executor``): the edges closing the graph's cycles (its
back edges, found once by ``build`` from the start node: see ``_back_edges``) are loops; from
a start node, the other edges form a DAG (``Pass``); ``graphlib.TopologicalSorter`` gives the
nodes whose predecessors are all done, and those that a finished predecessor chose run
together as one layer. A node no predecessor chose is skipped. A ``Next``, or a back edge
taken (a loop), ends the pass: the run goes on with a new pass from that node, and from the
nodes the old pass had chosen and not run yet (a sibling branch goes on).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from core_agent.contracts.errors import UsageError, is_interruption
from core_agent.workflows.errors import WorkflowDefinitionError, WorkflowNodeError, WorkflowWarning
from core_agent.workflows.reducers import Reducer, field_reducers
from shared.agent_protocol import TaskRequest, TaskResult

S = TypeVar("S", bound=BaseModel)

NodeUpdate = Mapping[str, Any] | None
"""What a node returns: the fields it sets (``None``: the changes it made to its copy)."""


@dataclass(frozen=True, slots=True)
class Next:
    """Returned by a node: go to ``node`` (declared in the node's ``jumps``) with ``data``.

    ``data`` is given to the target as its second argument (it must be JSON data: it is
    checkpointed); ``update`` is the state update of the jumping node, as a dict return is.
    """

    node: str
    data: Any = None
    update: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class FunctionNode:
    """An async function ``(state)`` or ``(state, data)`` returning an update or a ``Next``."""

    call: Callable[..., Awaitable[Any]]
    takes_data: bool


@dataclass(frozen=True, slots=True)
class AgentNode:
    """A child task of the workflow task: ``request(state)``, its result mapped by ``output``."""

    request: Callable[[Any], TaskRequest]
    output: Callable[[Any, TaskResult], NodeUpdate]


@dataclass(frozen=True, slots=True)
class SubworkflowNode:
    """Another workflow, run as a child task from ``input(state)``; ``output`` maps its end."""

    workflow: Workflow[Any]
    input: Callable[[Any], BaseModel]
    output: Callable[[Any, Any], NodeUpdate]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of a workflow."""

    name: str
    kind: Literal["function", "agent", "workflow"]
    body: FunctionNode | AgentNode | SubworkflowNode
    jumps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Edge:
    """``source`` -> ``target``, taken when ``when(state)`` is true (always without one)."""

    source: str
    target: str
    when: Callable[[Any], bool] | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """After ``source``, ``choose(state)`` names the next node(s), among ``targets``."""

    source: str
    choose: Callable[[Any], str | Sequence[str] | None]
    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pass:
    """The part of the graph a run goes through from ``starts``, without the cycles' back edges.

    ``predecessors`` is the DAG for ``graphlib.TopologicalSorter``; an edge of ``back_edges``
    (the graph's, the same for every pass) taken at run time is a jump (a new pass from its
    target, and from the nodes the pass had chosen and not yet run).
    """

    starts: tuple[str, ...]
    predecessors: dict[str, set[str]]
    back_edges: frozenset[tuple[str, str]]


@dataclass(slots=True)
class _Graph:
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)


class Workflow(Generic[S]):
    """A graph of nodes over the state ``state`` (a pydantic model); see the module.

    ``name`` and ``version`` identify it in its tasks' checkpoints: a task resumes only with
    the same name and version. ``max_concurrency`` bounds the nodes of a layer running at once;
    ``max_layers`` stops a run that loops without end. ``allow_fan_out`` says that a node with
    several unconditional edges is meant to start them all in parallel (else a warning).
    """

    def __init__(
        self,
        name: str,
        state: type[S],
        *,
        version: int = 1,
        max_concurrency: int = 8,
        max_layers: int = 10_000,
        allow_fan_out: bool = False,
    ) -> None:
        if not name.strip():
            raise UsageError("a workflow needs a name")
        if max_concurrency < 1 or max_layers < 1:
            raise UsageError("max_concurrency and max_layers must be at least 1")
        self.name = name
        self.state_type = state
        self.version = version
        self.max_concurrency = max_concurrency
        self.max_layers = max_layers
        self.allow_fan_out = allow_fan_out
        self.reducers: dict[str, Reducer] = field_reducers(state)
        self._graph = _Graph()
        self._entry: str | None = None
        self._built = False
        self.shape = ""
        """A digest of the graph's structure and state fields, set by ``build``: a task
        records it, and is resumed only by a workflow of the same shape (see ``registry``)."""
        self._passes: dict[tuple[str, ...], Pass] = {}
        self._out_edges: dict[str, list[Edge]] = {}
        self._out_routes: dict[str, list[Route]] = {}
        self._back_edges: frozenset[tuple[str, str]] = frozenset()

    # -- building ---------------------------------------------------------------------------

    def node(
        self, name: str, call: Callable[..., Awaitable[Any]], *, jumps: Iterable[str] = ()
    ) -> Workflow[S]:
        """Add an async function node: ``call(state)`` or ``call(state, data)``.

        It gets its own copy of the state. It returns a dict of field updates, ``None`` (the
        fields it changed on its copy are its updates), or ``Next(...)`` to one of ``jumps``.
        """
        if not inspect.iscoroutinefunction(call):
            raise UsageError(f"workflow {self.name!r}: node {name!r} must be an async function")
        takes_data = len(inspect.signature(call).parameters) >= 2
        return self._add(NodeSpec(name, "function", FunctionNode(call, takes_data), tuple(jumps)))

    def agent(
        self,
        name: str,
        request: TaskRequest | Callable[[S], TaskRequest],
        *,
        output: str | Callable[[S, TaskResult], NodeUpdate],
        jumps: Iterable[str] = (),
    ) -> Workflow[S]:
        """Add an agent node: ``request`` (or ``request(state)``) runs as a child kernel task.

        ``output`` is the state field that gets the child's answer, or a function of the state
        and the child's ``TaskResult`` returning an update. The child runs in a session of its
        own, under the kernel's approver and policy; canceling the workflow cancels it.
        """
        build = request if callable(request) else (lambda _state, fixed=request: fixed)
        mapped = output if callable(output) else _answer_into(output)
        return self._add(NodeSpec(name, "agent", AgentNode(build, mapped), tuple(jumps)))

    def subworkflow(
        self,
        name: str,
        workflow: Workflow[Any],
        *,
        output: Callable[[S, Any], NodeUpdate],
        input: Callable[[S], BaseModel] | None = None,
        jumps: Iterable[str] = (),
    ) -> Workflow[S]:
        """Add a node running ``workflow`` as a child task, from ``input(state)``.

        Without ``input`` the child starts from a copy of this state (the two workflows must
        share the state type). ``output(state, child_final_state)`` returns this node's update.
        """
        if input is None:
            if workflow.state_type is not self.state_type:
                raise UsageError(
                    f"workflow {self.name!r}: node {name!r} runs {workflow.name!r} over "
                    f"{workflow.state_type.__name__}, not {self.state_type.__name__}: "
                    "pass input=... to build its state"
                )
            input = _same_state
        body = SubworkflowNode(workflow, input, output)
        return self._add(NodeSpec(name, "workflow", body, tuple(jumps)))

    def edge(
        self, source: str, target: str, *, when: Callable[[S], bool] | None = None
    ) -> Workflow[S]:
        """After ``source``, run ``target`` (only when ``when(state)`` is true, if given)."""
        self._check_open()
        self._graph.edges.append(Edge(source, target, when))
        return self

    def route(
        self,
        source: str,
        choose: Callable[[S], str | Sequence[str] | None],
        targets: Iterable[str],
    ) -> Workflow[S]:
        """After ``source``, run the node(s) ``choose(state)`` names, each one of ``targets``."""
        self._check_open()
        self._graph.routes.append(Route(source, choose, tuple(targets)))
        return self

    def start(self, name: str) -> Workflow[S]:
        """Start runs at ``name`` (the first node added, by default)."""
        self._check_open()
        self._entry = name
        return self

    def _add(self, spec: NodeSpec) -> Workflow[S]:
        self._check_open()
        if not spec.name.strip():
            raise UsageError(f"workflow {self.name!r}: a node needs a name")
        if spec.name in self._graph.nodes:
            raise UsageError(f"workflow {self.name!r}: there is already a node {spec.name!r}")
        self._graph.nodes[spec.name] = spec
        return self

    def _check_open(self) -> None:
        if self._built:
            raise UsageError(f"workflow {self.name!r} is built: it can no longer change")

    # -- checking -----------------------------------------------------------------------------

    def build(self) -> Workflow[S]:
        """Check the graph, freeze it and register it by name and version; returns it.

        Building a built workflow only registers it again (see ``registry``): several
        versions of one name may be registered at once.

        Raises:
            WorkflowDefinitionError: Unknown names, unreachable nodes, or a cycle that has no
                way out (or only unconditional edges); the message names each node.

        Warns:
            WorkflowWarning: A node fans out over several unconditional edges (without
                ``allow_fan_out``): they run in parallel, each on a copy of the state.
        """
        from core_agent.workflows.registry import register  # the registry holds built ones

        if self._built:
            register(self)  # again, if it was forgotten since (nothing if it is known)
            return self
        problems, cautions = self.check()
        if problems:
            raise WorkflowDefinitionError(
                f"workflow {self.name!r} cannot run:\n" + "\n".join(f"- {p}" for p in problems)
            )
        for caution in cautions:
            warnings.warn(f"workflow {self.name!r}: {caution}", WorkflowWarning, stacklevel=2)
        for edge in self._graph.edges:
            self._out_edges.setdefault(edge.source, []).append(edge)
        for route in self._graph.routes:
            self._out_routes.setdefault(route.source, []).append(route)
        self._back_edges = _back_edges(
            self.entry, list(self._graph.nodes), self._static_targets, self._ways
        )
        self._built = True
        self.shape = _shape_of(self.entry, self._graph, self.state_type, self.reducers)
        register(self)
        return self

    def check(self) -> tuple[list[str], list[str]]:
        """The graph's problems (errors) and cautions (warnings), without building it."""
        graph = self._graph
        problems: list[str] = []
        if not graph.nodes:
            return ["it has no nodes"], []
        names = graph.nodes.keys()
        known = ", ".join(names)
        entry = self.entry
        if entry not in names:
            problems.append(f"start node {entry!r} is not a node (nodes: {known})")
        for edge in graph.edges:
            for end in (edge.source, edge.target):
                if end not in names:
                    problems.append(
                        f"edge {edge.source} -> {edge.target}: no node {end!r} (nodes: {known})"
                    )
        for route in graph.routes:
            if route.source not in names:
                problems.append(f"route from {route.source!r}: no such node (nodes: {known})")
            if not route.targets:
                problems.append(f"route from {route.source!r} has no targets")
            for target in route.targets:
                if target not in names:
                    problems.append(
                        f"route from {route.source!r}: no node {target!r} (nodes: {known})"
                    )
        for spec in graph.nodes.values():
            for target in spec.jumps:
                if target not in names:
                    problems.append(
                        f"node {spec.name!r} jumps to {target!r}: no such node (nodes: {known})"
                    )
        if problems:
            return problems, []
        reachable = self._reachable(entry)
        unreachable = [name for name in names if name not in reachable]
        if unreachable:
            problems.append(
                f"node(s) {', '.join(map(repr, unreachable))} cannot be reached from {entry!r} "
                "(by an edge, a route or a declared jump)"
            )
        problems.extend(self._cycle_problems())
        return problems, self._fan_out_cautions()

    @property
    def entry(self) -> str:
        """The node runs start at."""
        if self._entry is not None:
            return self._entry
        return next(iter(self._graph.nodes), "")

    def _ways(self, name: str) -> list[str]:
        """Every node ``name`` may hand over to: edges, route targets, declared jumps."""
        return [*self._static_targets(name), *self._graph.nodes[name].jumps]

    def _static_targets(self, name: str) -> list[str]:
        """The nodes edges and routes lead to from ``name``, in the order they were added."""
        targets = [edge.target for edge in self._graph.edges if edge.source == name]
        for route in self._graph.routes:
            if route.source == name:
                targets.extend(route.targets)
        return list(dict.fromkeys(targets))

    def _reachable(self, start: str) -> set[str]:
        seen = {start}
        todo = [start]
        while todo:
            for target in self._ways(todo.pop()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    def _cycle_problems(self) -> list[str]:
        """Cycles with no way out, or that nothing could ever leave, judged as runs go.

        At run time a node's ``Next`` replaces its edges and routes, and an edge it takes back
        into the cycle ends the pass there (the loop goes on) whatever else it chose; an
        edge it takes forward into the cycle keeps the cycle going too. So a node with an
        unconditional edge to a node of its cycle, and no jump out of it, always hands the
        run on inside the cycle, whatever routes or conditional edges leave it. A cycle
        whose every node is such a node never ends.
        """
        problems = []
        for members in _strong_components(self._graph.nodes, self._static_targets):
            inside = set(members)
            cyclic = len(members) > 1 or members[0] in self._static_targets(members[0])
            if not cyclic:
                continue
            shown = ", ".join(map(repr, members))
            leaves = any(
                target not in inside for member in members for target in self._ways(member)
            )
            if not leaves:
                problems.append(
                    f"the cycle through {shown} has no way out: no edge, route or jump leaves it"
                )
                continue
            if all(self._always_stays(member, inside) for member in members):
                problems.append(
                    f"the cycle through {shown} never ends: each of its nodes has an "
                    "unconditional edge to a node of the cycle (itself included), taken every "
                    "time it runs (a loop back wins over the routes and edges that leave, and "
                    "an edge forward keeps the cycle going beside them); make one of those "
                    "edges conditional (edge(..., when=...)), a route, or give a node a Next "
                    "jump out"
                )
        return problems

    def _always_stays(self, name: str, cycle: set[str]) -> bool:
        """Whether node ``name`` hands the run on inside ``cycle`` every time it runs."""
        if any(target not in cycle for target in self._graph.nodes[name].jumps):
            return False  # its Next may leave, and a Next replaces its edges
        return any(
            edge.source == name and edge.target in cycle and edge.when is None
            for edge in self._graph.edges
        )

    def _fan_out_cautions(self) -> list[str]:
        if self.allow_fan_out:
            return []
        cautions = []
        for name in self._graph.nodes:
            fixed = [e.target for e in self._graph.edges if e.source == name and e.when is None]
            if len(fixed) > 1:
                cautions.append(
                    f"node {name!r} fans out unconditionally to {', '.join(map(repr, fixed))}: "
                    "they run in parallel, each on its own copy of the state, merged by the "
                    "fields' reducers (pass allow_fan_out=True if that is what you mean)"
                )
        return cautions

    # -- running (for the executor) -----------------------------------------------------------

    @property
    def built(self) -> bool:
        """Whether ``build`` checked and froze it."""
        return self._built

    def spec(self, name: str) -> NodeSpec:
        """The node ``name``."""
        return self._graph.nodes[name]

    @property
    def order(self) -> dict[str, int]:
        """Each node's position in the order nodes were added (a layer's tie-break order)."""
        return {name: index for index, name in enumerate(self._graph.nodes)}

    def pass_from(self, *starts: str) -> Pass:
        """The DAG a pass starting at ``starts`` goes through (computed once per starts)."""
        found = self._passes.get(starts)
        if found is None:
            found = self._passes[starts] = _pass_from(
                starts, self._static_targets, self._back_edges
            )
        return found

    def successors(self, name: str, state: S, layer: int) -> list[str]:
        """The nodes ``name`` hands over to, given the merged ``state`` after its layer.

        Raises:
            WorkflowNodeError: A condition or route raised, or a route named a node it does
                not declare.
        """
        chosen: list[str] = []
        try:
            for edge in self._out_edges.get(name, ()):
                if edge.when is None or edge.when(state):
                    chosen.append(edge.target)
            for route in self._out_routes.get(name, ()):
                picked = route.choose(state)
                picks = [] if picked is None else [picked] if isinstance(picked, str) else picked
                for target in picks:
                    if target not in route.targets:
                        raise WorkflowNodeError(
                            f"the route after {name!r} chose {target!r}, which is not one of "
                            f"its targets ({', '.join(route.targets)})",
                            node=name,
                            layer=layer,
                        )
                    chosen.append(target)
        except WorkflowNodeError:
            raise
        except BaseException as exc:  # a condition's SystemExit fails the node as well
            if is_interruption(exc):
                raise
            raise WorkflowNodeError(
                f"choosing the node after {name!r} failed: {type(exc).__name__}: {exc}",
                node=name,
                layer=layer,
            ) from exc
        return list(dict.fromkeys(chosen))


def _shape_of(
    entry: str, graph: _Graph, state: type[BaseModel], reducers: Mapping[str, Reducer]
) -> str:
    """A digest of what a checkpoint's meaning depends on.

    The nodes, edges, routes, jumps, the entry and the state's fields (names, types,
    reducers); not the nodes' code: a fixed bug in a node does not make its tasks unresumable.
    """

    def named(annotation: Any) -> str:
        # Without module paths: a class is __main__.X in a script and pkg.X when imported.
        return re.sub(r"(?:\w+\.)+(\w+)", r"\1", repr(annotation))

    described = {
        "entry": entry,
        "nodes": [
            [
                spec.name,
                spec.kind,
                list(spec.jumps),
                [spec.body.workflow.name, spec.body.workflow.version]
                if isinstance(spec.body, SubworkflowNode)
                else None,
            ]
            for spec in graph.nodes.values()
        ],
        "edges": [[e.source, e.target, e.when is not None] for e in graph.edges],
        "routes": [[r.source, list(r.targets)] for r in graph.routes],
        "state": [
            [name, named(info.annotation), reducers[name].name if name in reducers else None]
            for name, info in state.model_fields.items()
        ],
    }
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:16]


def _answer_into(field_name: str) -> Callable[[Any, TaskResult], NodeUpdate]:
    def output(_state: Any, result: TaskResult) -> NodeUpdate:
        return {field_name: result.output or ""}

    return output


def _same_state(state: BaseModel) -> BaseModel:
    return state.model_copy(deep=True)


def _pass_from(
    starts: tuple[str, ...], targets: Callable[[str], list[str]], back: frozenset[tuple[str, str]]
) -> Pass:
    """The graph's edges minus its ``back`` edges, from ``starts``: a DAG (see ``_back_edges``)."""
    predecessors: dict[str, set[str]] = {start: set() for start in starts}
    todo = list(starts)
    while todo:
        node = todo.pop()
        for target in targets(node):
            if (node, target) in back:
                continue
            if target not in predecessors:
                predecessors[target] = set()
                todo.append(target)
            predecessors[target].add(node)
    return Pass(starts, predecessors, back)


def _back_edges(
    entry: str,
    order: Sequence[str],
    targets: Callable[[str], list[str]],
    ways: Callable[[str], list[str]],
) -> frozenset[tuple[str, str]]:
    """The edges that close the graph's cycles (loops), a property of the graph alone.

    Each cycle is entered at its header: of the nodes of a strongly connected component that
    the run can enter from outside it (the start, or a node with an edge, route or jump
    from outside), the one nearest the start (fewest hand-overs from it; then the first
    added). The edges into the header from inside the component are its back edges; without
    them the rest of the component is searched for the cycles left (nested loops, or a
    cycle entered at several nodes), until none is. For a loop with one entry this is the
    classic definition (an edge to a node that dominates its source); it depends neither on
    the order edges were declared in nor on where a pass starts, and what remains is a DAG.
    """
    static = {name: targets(name) for name in order}
    handed = {name: ways(name) for name in order}
    depth = {entry: 0}
    frontier = [entry]
    while frontier:
        following = []
        for node in frontier:
            for target in handed[node]:
                if target not in depth:
                    depth[target] = depth[node] + 1
                    following.append(target)
        frontier = following
    rank = {name: (depth.get(name, len(order)), index) for index, name in enumerate(order)}
    entered_by: dict[str, set[str]] = {name: set() for name in order}
    for name in order:
        for target in handed[name]:
            entered_by[target].add(name)
    back = {(name, name) for name in order if name in static[name]}
    todo: list[set[str]] = [set(order)]
    while todo:
        region = todo.pop()

        def inside(name: str, region: set[str] = region) -> list[str]:
            return [t for t in static[name] if t in region and (name, t) not in back]

        for members in _strong_components(sorted(region, key=rank.__getitem__), inside):
            if len(members) < 2:
                continue
            component = set(members)
            entries = [
                name for name in members if name == entry or entered_by[name] - component
            ] or members  # a cycle entered by jumps from within it only: any of its nodes
            header = min(entries, key=rank.__getitem__)
            back.update((name, header) for name in members if header in inside(name))
            todo.append(component - {header})
    return frozenset(back)


def _strong_components(
    nodes: Iterable[str], targets: Callable[[str], list[str]]
) -> list[list[str]]:
    """The strongly connected components (Kosaraju, without recursion: graphs may be deep)."""
    order: list[str] = []
    seen: set[str] = set()
    for root in nodes:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(targets(root)))]
        while stack:
            node, pending = stack[-1]
            for target in pending:
                if target not in seen:
                    seen.add(target)
                    stack.append((target, iter(targets(target))))
                    break
            else:
                stack.pop()
                order.append(node)
    reverse: dict[str, list[str]] = {}
    for node in order:
        for target in targets(node):
            reverse.setdefault(target, []).append(node)
    components: list[list[str]] = []
    assigned: set[str] = set()
    for root in reversed(order):
        if root in assigned:
            continue
        component = []
        todo = [root]
        assigned.add(root)
        while todo:
            node = todo.pop()
            component.append(node)
            for source in reverse.get(node, ()):
                if source not in assigned:
                    assigned.add(source)
                    todo.append(source)
        components.append(component)
    return components
