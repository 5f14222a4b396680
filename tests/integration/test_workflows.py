"""Workflows run as kernel tasks: parallel layers, jumps, conditions, failure, crash, cancel."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, Field

from core_agent import create_kernel, tool
from core_agent.contracts.errors import DefinitionNotLoadedError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.workflows import (
    Next,
    Workflow,
    WorkflowDefinitionError,
    WorkflowWarning,
    add,
    append,
    rerun_workflow,
    resume_workflow,
    run_workflow,
    workflow_request,
    workflow_snapshot,
)
from core_agent.workflows.registry import forget
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio
CRASHING_HOST = Path(__file__).parents[1] / "support" / "workflow_host.py"


class Notes(BaseModel):
    log: Annotated[list[str], append] = []
    verdict: str = ""
    count: int = 0
    answer: str = ""


@pytest.fixture(autouse=True)
def _fresh_registry() -> None:
    for name in ("diamond", "jump", "branch", "loop", "clash", "flaky", "asks", "blocks"):
        forget(name)


async def test_a_diamond_runs_a_and_b_in_parallel_then_end_after_both(settings) -> None:
    both_started = anyio.Event()
    started: set[str] = set()

    async def side(name: str) -> dict[str, list[str]]:
        started.add(name)
        if started == {"a", "b"}:
            both_started.set()
        await both_started.wait()  # neither finishes before the other has started
        return {"log": [name]}

    async def a(state: Notes) -> dict[str, list[str]]:
        return await side("a")

    async def b(state: Notes) -> dict[str, list[str]]:
        return await side("b")

    async def start(state: Notes) -> dict[str, list[str]]:
        return {"log": ["start"]}

    async def end(state: Notes) -> dict[str, str]:
        return {"verdict": "+".join(state.log)}

    workflow = (
        Workflow("diamond", Notes, allow_fan_out=True)
        .node("start", start)
        .node("a", a)
        .node("b", b)
        .node("end", end)
        .edge("start", "a")
        .edge("start", "b")
        .edge("a", "end")
        .edge("b", "end")
    )
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
        spans = {s.name: s for s in await kernel.task_spans(result.task_id) if s.kind == "step"}
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED
    assert result.state is not None
    assert result.state.log == ["start", "a", "b"]  # merged by the append reducer
    assert result.state.verdict == "start+a+b"
    a_span, b_span, end_span = spans["node a"], spans["node b"], spans["node end"]
    assert a_span.started_at < b_span.ended_at and b_span.started_at < a_span.ended_at
    assert end_span.started_at >= max(a_span.ended_at, b_span.ended_at)
    assert {s.parent_span_id for s in spans.values()} == {
        s.span_id for s in await _run_spans(settings, result.task_id)
    }
    kinds = [(e.kind, getattr(e, "node", None)) for e in events]
    assert kinds.index(("workflow.node_started", "b")) < kinds.index(
        ("workflow.node_finished", "a")
    )
    assert kinds[-1] == ("task.succeeded", None)


async def _run_spans(settings: AgentSettings, task_id: str) -> list:
    async with create_kernel(settings) as kernel:
        return [s for s in await kernel.task_spans(task_id) if s.kind == "run"]


async def test_a_next_jumps_to_a_named_node_with_data(settings) -> None:
    ran: list[str] = []

    async def check(state: Notes) -> Next:
        ran.append("check")
        return Next("report", data={"reason": "nothing to fix"}, update={"count": 1})

    async def fix(state: Notes) -> None:
        ran.append("fix")

    async def report(state: Notes, data: dict[str, str]) -> dict[str, str]:
        ran.append("report")
        return {"verdict": data["reason"]}

    workflow = (
        Workflow("jump", Notes)
        .node("check", check, jumps=["report"])
        .node("fix", fix)
        .node("report", report)
        .edge("check", "fix")
        .edge("fix", "report")
    )
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
        events = await kernel.task_events(result.task_id)
    finished = [e for e in events if e.kind == "workflow.node_finished"]
    assert ran == ["check", "report"]  # the jump replaced the edge to fix
    assert result.state == Notes(verdict="nothing to fix", count=1)
    assert finished[0].jump == "report"

    # replay shows the nodes, and diff compares them (reviewer: only the route, memory and
    # the answer were shown).
    from core_agent.replay import TaskRecords
    from core_agent.replay.rendering import step_text

    async with TaskRecords(settings) as records:
        trajectory = await records.trajectory(result.task_id)
    nodes = [(s.kind, s.data["node"]) for s in trajectory.steps if s.kind.startswith("node")]
    assert nodes == [
        ("node", "check"),
        ("node_done", "check"),
        ("node", "report"),
        ("node_done", "report"),
    ]
    done = [s for s in trajectory.compared if s.kind == "node_done"]
    assert step_text(done[0]) == "check: wrote count → report"
    assert done[0].key is not None and done[0].key["jump"] == "report"


async def test_conditional_edges_choose_the_branch_and_end_a_loop(settings) -> None:
    async def draft(state: Notes) -> dict[str, int]:
        return {"count": state.count + 1}

    async def accept(state: Notes) -> dict[str, str]:
        return {"verdict": f"accepted after {state.count} drafts"}

    async def reject(state: Notes) -> dict[str, str]:
        return {"verdict": "rejected"}

    loop = (
        Workflow("loop", Notes)
        .node("draft", draft)
        .node("accept", accept)
        .edge("draft", "draft", when=lambda s: s.count < 3)  # back to itself: a loop
        .edge("draft", "accept", when=lambda s: s.count >= 3)
    )
    branch = (
        Workflow("branch", Notes)
        .node("draft", draft)
        .node("accept", accept)
        .node("reject", reject)
        .route("draft", lambda s: "accept" if s.count > 5 else "reject", ["accept", "reject"])
    )
    async with create_kernel(settings) as kernel:
        looped = await run_workflow(kernel, loop, Notes())
        branched = await run_workflow(kernel, branch, Notes())
    assert looped.state == Notes(count=3, verdict="accepted after 3 drafts")
    assert branched.state == Notes(count=1, verdict="rejected")


class Counted(BaseModel):
    log: Annotated[list[str], append] = []
    a: Annotated[int, add] = 0
    b: Annotated[int, add] = 0


def _counting(name: str, field: str | None = None):
    async def node(state: Counted) -> dict[str, object]:
        return {"log": [name], **({field: 1} if field else {})}

    return node


async def test_a_loop_in_one_parallel_branch_keeps_the_others_and_the_join_waits(
    settings,
) -> None:
    sibling = (
        Workflow("loop-beside-a-branch", Counted, allow_fan_out=True)
        .node("start", _counting("start"))
        .node("a", _counting("a", "a"))
        .node("b", _counting("b"))
        .node("b2", _counting("b2"))
        .node("end", _counting("end"))
        .edge("start", "a")
        .edge("start", "b")
        .edge("b", "b2")
        .edge("a", "a", when=lambda s: s.a < 2)
        .edge("a", "end", when=lambda s: s.a >= 2)
        .edge("b2", "end")
    )
    two_loops = (
        Workflow("two-loops", Counted, allow_fan_out=True)
        .node("start", _counting("start"))
        .node("a", _counting("a", "a"))
        .node("b", _counting("b", "b"))
        .node("end", _counting("end"))
        .edge("start", "a")
        .edge("start", "b")
        .edge("a", "a", when=lambda s: s.a < 2)
        .edge("b", "b", when=lambda s: s.b < 3)
        .edge("a", "end", when=lambda s: s.a >= 2)
        .edge("b", "end", when=lambda s: s.b >= 3)
    )
    forget(sibling.name)
    forget(two_loops.name)
    async with create_kernel(settings) as kernel:
        first = await run_workflow(kernel, sibling, Counted())
        second = await run_workflow(kernel, two_loops, Counted())
    assert first.state is not None, first.task.error
    # b2, chosen by b while a looped, still runs, and end waits for it.
    assert first.state.log == ["start", "a", "b", "a", "b2", "end"]
    assert second.state is not None, second.task.error
    # Both loops go round as often as they should; end runs once, after both.
    assert second.state.log == ["start", "a", "b", "a", "b", "b", "end"]


def _logged(
    name: str, *edges: tuple[str, str] | tuple[str, str, object], counter: str = "review"
) -> Workflow[Counted]:
    """A workflow of recording nodes (``counter`` counts into field a), in edge order."""
    workflow = Workflow(name, Counted, allow_fan_out=True)
    for edge in edges:
        for node in edge[:2]:
            if isinstance(node, str) and node not in workflow.order:
                workflow.node(node, _counting(node, "a" if node == counter else None))
    for source, target, *when in edges:
        workflow.edge(source, target, when=when[0] if when else None)
    forget(name)
    return workflow


async def test_back_edges_belong_to_the_graph_not_to_edge_order_or_where_a_pass_starts(
    settings,
) -> None:
    never = (lambda s: False,)
    # A join whose edge back to one of its inputs is never taken waits for both inputs, in
    # whichever order the edges were declared.
    join = [("start", "x"), ("start", "y"), ("x", "review"), ("y", "review")]
    late = _logged("join-late", *join, ("review", "y", *never), ("review", "end"))
    early = _logged("join-early", ("start", "y"), ("start", "x"), *join[2:])
    early.edge("review", "y", when=never[0]).node("end", _counting("end")).edge("review", "end")
    # A review sending both parallel drafts back: both go round, review and end run once
    # a round.
    again = (lambda s: s.a < 2,)
    enough = (lambda s: s.a >= 2,)
    twice = _logged(
        "two-back",
        *join,
        ("review", "x", *again),
        ("review", "y", *again),
        ("review", "end", *enough),
    )
    # A loop whose body has a join (h -> a -> c -> b, h -> b): b waits for c every round.
    body = _logged(
        "join-in-loop",
        ("h", "a"),
        ("h", "b"),
        ("a", "c"),
        ("c", "b"),
        ("b", "h", *again),
        ("b", "end", *enough),
        counter="b",
    )

    # A Next into the middle of a cycle: p's fan-out to z is kept when the loop reaches p.
    async def jumper(state: Counted) -> Next:
        return Next("q", update={"log": ["j"]})

    into = (
        Workflow("next-into-cycle", Counted, allow_fan_out=True)
        .node("s", _counting("s"))
        .node("j", jumper, jumps=["q"])
        .node("p", _counting("p"))
        .node("q", _counting("q", "a"))
        .node("r", _counting("r"))
        .node("z", _counting("z"))
        .node("end", _counting("end"))
        .edge("s", "j")
        .edge("s", "p", when=never[0])
        .edge("p", "q")
        .edge("p", "z")
        .edge("q", "r")
        .edge("r", "p", when=lambda s: s.a < 3)
        .edge("r", "end", when=lambda s: s.a >= 3)
    )
    forget(into.name)
    async with create_kernel(settings) as kernel:
        logs = {}
        for workflow in (late, early, twice, body, into):
            result = await run_workflow(kernel, workflow, Counted())
            assert result.state is not None, result.task.error
            logs[workflow.name] = result.state.log
    assert logs["join-late"] == ["start", "x", "y", "review", "end"]
    assert logs["join-early"] == ["start", "y", "x", "review", "end"]
    assert logs["two-back"] == ["start", "x", "y", "review", "x", "y", "review", "end"]
    assert logs["join-in-loop"] == ["h", "a", "c", "b"] * 2 + ["end"]
    p_round = ["p", "q", "z", "r"]
    assert logs["next-into-cycle"] == ["s", "j", "q", "r", *p_round, *p_round, "end"]


def test_back_edges_do_not_depend_on_the_order_edges_are_declared_in() -> None:
    async def noop(state: Counted) -> None:
        return None

    when = lambda s: s.a < 2  # noqa: E731
    graphs = {
        # a join with an edge back to one input, and a review sending both drafts back
        "joins": [
            *[("start", "x"), ("start", "y"), ("x", "review"), ("y", "review")],
            *[("review", "y"), ("review", "x"), ("review", "end")],
        ],
        # nested loops, a loop body with a join, a self-loop
        "nested": [
            *[("h", "a"), ("a", "b"), ("b", "a"), ("b", "h"), ("b", "c"), ("h", "c")],
            *[("c", "c"), ("c", "end")],
        ],
    }
    expected = {
        "joins": {("review", "x"), ("review", "y")},
        "nested": {("b", "a"), ("b", "h"), ("c", "c")},
    }
    shuffler = random.Random(7)
    for name, edges in graphs.items():
        for attempt in range(40):
            order = edges[:]
            shuffler.shuffle(order)
            workflow = Workflow(f"{name}-{attempt}", Counted, allow_fan_out=True)
            for node in dict.fromkeys(n for edge in edges for n in edge):
                workflow.node(node, noop)
            for source, target in order:
                workflow.edge(source, target, when=when)
            forget(workflow.name)
            workflow.build()
            forget(workflow.name)
            assert workflow.pass_from(workflow.entry).back_edges == expected[name], order


async def test_parallel_nodes_writing_one_field_without_a_reducer_fail_clearly(settings) -> None:
    async def start(state: Notes) -> None:
        return None

    async def left(state: Notes) -> dict[str, str]:
        return {"verdict": "left"}

    async def right(state: Notes) -> None:
        state.verdict = "right"  # changed on its own copy: the same write

    workflow = (
        Workflow("clash", Notes, allow_fan_out=True)
        .node("start", start)
        .node("left", left)
        .node("right", right)
        .edge("start", "left")
        .edge("start", "right")
    )
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
    assert result.status is TaskStatus.FAILED
    assert "nodes 'left' and 'right' of layer 1 both wrote field 'verdict'" in result.task.error
    assert "which has no reducer" in result.task.error


async def test_append_takes_a_string_as_one_item_and_a_list_as_its_items(settings) -> None:
    async def word(state: Notes) -> dict[str, str]:
        return {"log": "hello"}  # one item, not five characters

    async def words(state: Notes) -> dict[str, list[str]]:
        return {"log": ["a", "b"]}

    workflow = Workflow("appends", Notes).node("word", word).node("words", words)
    workflow.edge("word", "words")
    forget("appends")
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
    assert result.state is not None, result.task.error
    assert result.state.log == ["hello", "a", "b"]
    assert append([1], (2, 3)) == [1, 2, 3] and append([], {"k": 1}) == [{"k": 1}]
    assert append([], b"\xff") == [b"\xff"] and append([], 7) == [7]


class Aliased(BaseModel):
    x: int = Field(default=0, alias="X")
    score: float = 0.0
    blob: bytes = b""


async def test_a_state_survives_its_checkpoints_by_alias_and_with_nan_and_infinity(
    settings,
) -> None:
    seen: list[int] = []

    async def first(state: Aliased) -> dict[str, float]:
        seen.append(state.x)
        return {"x": state.x + 5, "score": float("nan")}

    async def reads(state: Aliased) -> None:
        seen.append(state.x)  # neither writes score: NaN != NaN is no write

    async def by_alias(state: Aliased) -> dict[str, int]:
        return {"X": state.x + 1}  # a field may be named by its alias too

    workflow = (
        Workflow("aliased", Aliased, allow_fan_out=True)
        .node("first", first)
        .node("a", reads)
        .node("b", reads)
        .node("last", by_alias)
        .edge("first", "a")
        .edge("first", "b")
        .edge("a", "last")
    )
    forget("aliased")
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Aliased(X=7, score=float("inf")))
        started = await run_workflow(
            kernel, Workflow("starts", Aliased).node("a", reads), Aliased(X=3, score=float("-inf"))
        )
        snapshot = await workflow_snapshot(kernel, workflow, result.task_id)
    forget("starts")
    assert result.status is TaskStatus.SUCCEEDED, result.task.error
    assert seen == [7, 12, 12, 3]
    assert result.state is not None and result.state.x == 13 and math.isnan(result.state.score)
    assert snapshot is not None and snapshot.state.x == 13 and math.isnan(snapshot.state.score)
    assert started.state == Aliased(X=3, score=float("-inf"))


async def test_state_or_jump_data_that_cannot_be_checkpointed_fails_clearly(settings) -> None:
    async def odd(state: Aliased) -> dict[str, bytes]:
        return {"blob": b"\xff\x00"}  # not UTF-8: no JSON string holds it

    async def jumps(state: Aliased) -> Next:
        return Next("target", data=object())

    async def target(state: Aliased, data: object) -> None:
        return None

    bytes_node = Workflow("odd-bytes", Aliased).node("odd", odd).node("after", target)
    bytes_node.edge("odd", "after")
    jump_node = Workflow("odd-data", Aliased).node("jumps", jumps, jumps=["target"])
    jump_node.node("target", target)
    forget("odd-bytes")
    forget("odd-data")

    class Hidden(BaseModel):
        hidden: str = Field(default="", exclude=True)  # not in its dumps: not checkpointed

    async def nothing(state: Hidden) -> None:
        return None

    hiding = Workflow("hides", Hidden).node("a", nothing)
    forget("hides")
    async with create_kernel(settings) as kernel:
        bad_state = await run_workflow(kernel, bytes_node, Aliased())
        bad_data = await run_workflow(kernel, jump_node, Aliased())
        with pytest.raises(UsageError, match="'blob' of Aliased cannot be JSON data"):
            await run_workflow(kernel, bytes_node, Aliased(blob=b"\xff"))
        with pytest.raises(UsageError, match=r"field\(s\) 'hidden' change in the round trip"):
            await run_workflow(kernel, hiding, Hidden(hidden="lost on a resume"))
    assert bad_state.status is TaskStatus.FAILED
    assert "field(s) 'blob' of Aliased cannot be JSON data" in (bad_state.task.error or "")
    assert "(written by 'odd')" in (bad_state.task.error or "")
    assert bad_data.status is TaskStatus.FAILED
    assert "the data of 'jumps''s Next('target') cannot be JSON data" in (bad_data.task.error or "")


class Loose(BaseModel):
    name: str = ""
    anything: Any = None
    step: int = 0


async def test_lone_surrogates_fail_where_written_and_nan_in_any_fields_is_kept(settings) -> None:
    async def first(state: Loose) -> dict[str, int]:
        return {"step": 1}

    async def listdir(state: Loose) -> dict[str, str]:
        return {"name": os.fsdecode(b"report-\xff.txt")}  # 'report-\udcff.txt'

    async def loose(state: Loose) -> dict[str, object]:
        return {"anything": ["\ud800"]}

    async def jumps(state: Loose) -> Next:
        return Next("target", data={"file": "\udcff"})

    async def target(state: Loose, data: object) -> None:
        return None

    async def odd_numbers(state: Loose) -> dict[str, object]:
        return {"anything": [math.nan, {"a": math.inf}]}

    async def reads(state: Loose) -> dict[str, str]:
        return {"name": repr(state.anything)}

    def chain(name: str, *nodes: tuple[str, Any]) -> Workflow[Loose]:
        workflow = Workflow(name, Loose)
        for node, call in nodes:
            workflow.node(node, call)
        for (source, _), (following, _) in itertools.pairwise(nodes):
            workflow.edge(source, following)
        forget(name)
        return workflow

    in_str = chain("surrogate-str", ("first", first), ("listdir", listdir), ("last", first))
    in_any = chain("surrogate-any", ("first", first), ("loose", loose))
    in_next = Workflow("surrogate-next", Loose).node("jumps", jumps, jumps=["target"])
    in_next.node("target", target)
    forget(in_next.name)
    nan_any = chain("nan-any", ("odd", odd_numbers), ("reads", reads))
    async with create_kernel(settings) as kernel:
        bad_str = await run_workflow(kernel, in_str, Loose())
        events = await kernel.task_events(bad_str.task_id)
        bad_any = await run_workflow(kernel, in_any, Loose())
        bad_next = await run_workflow(kernel, in_next, Loose())
        with pytest.raises(UsageError, match="'name' of Loose cannot be JSON data"):
            await run_workflow(kernel, in_str, Loose(name="\udcff"))
        kept = await run_workflow(kernel, nan_any, Loose())
        started = await run_workflow(
            kernel, chain("nan-start", ("reads", reads)), Loose(anything={"x": math.nan})
        )
    assert bad_str.status is TaskStatus.FAILED
    assert "field(s) 'name' of Loose cannot be JSON data" in (bad_str.task.error or "")
    assert "(written by 'listdir')" in (bad_str.task.error or "")
    finished = [e for e in events if e.kind == "workflow.node_finished" and e.node == "listdir"]
    assert [e.succeeded for e in finished] == [False]  # never succeeded beside layer 0's state
    assert bad_str.layers == 1 and bad_str.state == Loose(step=1)
    assert bad_any.status is TaskStatus.FAILED
    assert "'anything' of Loose cannot be JSON data" in (bad_any.task.error or "")
    assert bad_next.status is TaskStatus.FAILED
    assert "the data of 'jumps''s Next('target') cannot be JSON data" in (bad_next.task.error or "")
    assert kept.state is not None, kept.task.error
    assert kept.state.name == "[nan, {'a': inf}]"  # what the next node saw
    nan, rest = kept.state.anything  # and what the checkpoint kept
    assert math.isnan(nan) and rest == {"a": math.inf}
    assert started.state is not None, started.task.error  # an initial NaN in Any is kept too
    assert started.state.name == "{'x': nan}" and math.isnan(started.state.anything["x"])


def test_bad_graphs_are_refused_when_built_naming_the_nodes() -> None:
    async def noop(state: Notes) -> None:
        return None

    with pytest.raises(WorkflowDefinitionError, match="no node 'ghost'"):
        Workflow("bad1", Notes).node("a", noop).edge("a", "ghost").build()
    with pytest.raises(WorkflowDefinitionError, match=r"'island'.* cannot be reached"):
        Workflow("bad2", Notes).node("a", noop).node("island", noop).build()
    with pytest.raises(WorkflowDefinitionError, match="has no way out"):
        Workflow("bad3", Notes).node("a", noop).node("b", noop).edge("a", "b").edge(
            "b", "a", when=lambda s: True
        ).build()
    with pytest.raises(WorkflowDefinitionError, match="never ends"):
        Workflow("bad4", Notes).node("a", noop).node("b", noop).node("c", noop).edge("a", "b").edge(
            "b", "a"
        ).edge("b", "c").build()
    # A route out of a cycle does not end it when the loop back is unconditional: the back
    # edge is taken every time, before the route's choice could run.
    with pytest.raises(WorkflowDefinitionError, match=r"cycle through 'a', 'b' never ends"):
        Workflow("bad5", Notes).node("a", noop).node("b", noop).node("c", noop).edge("a", "b").edge(
            "b", "a"
        ).route("b", lambda s: "c", ["c"]).build()
    with pytest.raises(WorkflowDefinitionError, match=r"cycle through 'a' never ends"):
        Workflow("bad6", Notes).node("a", noop).node("b", noop).edge("a", "a").edge(
            "a", "b", when=lambda s: True
        ).build()
    for ending in (
        Workflow("ends1", Notes)
        .node("a", noop)
        .node("b", noop)
        .node("c", noop)
        .edge("a", "b")
        # the loop back is conditional: the route leaves when it is not taken
        .edge("b", "a", when=lambda s: s.count < 3)
        .route("b", lambda s: "c", ["c"]),
        Workflow("ends2", Notes)
        .node("a", noop)
        .node("b", noop, jumps=["c"])
        .node("c", noop)
        # b's Next may leave, and a Next replaces b's edges
        .edge("a", "b")
        .edge("b", "a"),
    ):
        ending.build()
        forget(ending.name)
    with pytest.warns(WorkflowWarning, match="fans out unconditionally to 'b', 'c'"):
        Workflow("fan", Notes).node("a", noop).node("b", noop).node("c", noop).edge("a", "b").edge(
            "a", "c"
        ).build()
    forget("fan")


async def test_a_failed_layer_rolls_back_to_the_last_good_checkpoint_and_reruns_from_it(
    settings,
) -> None:
    calls: list[str] = []
    broken = True

    async def gather(state: Notes) -> dict[str, list[str]]:
        calls.append("gather")
        return {"log": ["gathered"]}

    async def judge(state: Notes) -> dict[str, str]:
        calls.append("judge")
        if broken:
            state.log.append("half-done")  # a change the failure must not leave behind
            raise RuntimeError("the judge is out")
        return {"verdict": "fine"}

    workflow = Workflow("flaky", Notes).node("gather", gather).node("judge", judge)
    workflow.edge("gather", "judge")
    async with create_kernel(settings) as kernel:
        failed = await run_workflow(kernel, workflow, Notes())
        snapshot = await workflow_snapshot(kernel, workflow, failed.task_id)
        broken = False
        rerun = await rerun_workflow(kernel, workflow, failed.task_id)
    assert failed.status is TaskStatus.FAILED
    assert "node 'judge' failed: RuntimeError: the judge is out" in failed.task.error
    assert failed.state == Notes(log=["gathered"])  # the last good layer's state
    assert snapshot is not None and snapshot.layers == 1 and snapshot.next_nodes == ["judge"]
    assert rerun.status is TaskStatus.SUCCEEDED
    assert rerun.state == Notes(log=["gathered"], verdict="fine")
    assert calls == ["gather", "judge", "judge"]  # the good layer was not run again


async def test_a_run_failing_in_its_first_layer_keeps_its_initial_state_to_rerun_from(
    settings,
) -> None:
    broken = True

    async def first(state: Notes) -> dict[str, list[str]]:
        if broken:
            raise RuntimeError("first layer fails")
        return {"log": ["first"]}

    workflow = Workflow("fails-first", Notes).node("first", first).node("end", _nothing_node)
    workflow.edge("first", "end")
    forget("fails-first")
    async with create_kernel(settings) as kernel:
        failed = await run_workflow(kernel, workflow, Notes(count=4))
        snapshot = await workflow_snapshot(kernel, workflow, failed.task_id)
        broken = False
        rerun = await rerun_workflow(kernel, workflow, failed.task_id)
    assert failed.status is TaskStatus.FAILED
    assert "last completed layer" not in (failed.task.error or "")  # none completed
    assert failed.state == Notes(count=4)  # what it started from
    assert snapshot is not None and snapshot.layers == 0 and snapshot.next_nodes == ["first"]
    assert rerun.status is TaskStatus.SUCCEEDED, rerun.task.error
    assert rerun.state == Notes(log=["first"], count=4)


async def test_a_function_nodes_start_is_published_before_it_finishes(settings) -> None:
    seen = anyio.Event()

    async def waits(state: Notes) -> dict[str, int]:
        with anyio.fail_after(10):  # until the host has seen this node start
            await seen.wait()
        return {"count": 1}

    workflow = Workflow("announces", Notes).node("waits", waits).node("end", _nothing_node)
    workflow.edge("waits", "end")
    forget("announces")
    async with create_kernel(settings) as kernel:
        kinds = []
        async for event in kernel.stream_task(workflow_request(workflow, Notes())):
            kinds.append((event.kind, getattr(event, "node", None)))
            if kinds[-1] == ("workflow.node_started", "waits"):
                seen.set()
    assert kinds[-1] == ("task.succeeded", None)
    nodes = [k for k in kinds if k[0].startswith("workflow.")]
    assert nodes == [
        ("workflow.node_started", "waits"),
        ("workflow.node_finished", "waits"),
        ("workflow.node_started", "end"),
        ("workflow.node_finished", "end"),
    ]


def read_line(stream, timeout: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ""


def crash_in_second_layer(env: dict[str, str]) -> str:
    """Run the host until its second layer blocks, then kill -9 it; the line it printed."""
    with subprocess.Popen(
        [sys.executable, str(CRASHING_HOST)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as host:
        try:
            line = read_line(host.stdout, timeout=120)
            assert line.startswith("BLOCKED "), f"{line!r} {host.stderr.read()}"
            return line
        finally:
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=30)


async def test_a_workflow_killed_after_its_first_layer_resumes_without_running_it_again(
    tmp_path,
) -> None:
    effects = tmp_path / "effects.txt"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "WORKFLOW_EFFECTS": str(effects),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    line = crash_in_second_layer(env)
    task_id = line.split()[1]
    assert effects.read_text().split() == ["first", "second"]

    sys.path.insert(0, str(CRASHING_HOST.parent))
    try:
        import workflow_host  # registers the same workflow here
    finally:
        sys.path.remove(str(CRASHING_HOST.parent))
    os.environ["WORKFLOW_EFFECTS"] = str(effects)
    try:
        settings = AgentSettings(data_dir=tmp_path / "data", recovery="off")
        async with create_kernel(settings) as kernel:
            result = await resume_workflow(kernel, workflow_host.WORKFLOW, task_id)
            events = await kernel.task_events(task_id)
    finally:
        del os.environ["WORKFLOW_EFFECTS"]
    assert result.status is TaskStatus.SUCCEEDED, result.task.error
    # The first layer ran once, before the kill; the second ran again (it had not completed).
    assert effects.read_text().split() == ["first", "second", "second", "third"]
    assert result.state is not None and result.state.log == ["first", "second", "third"]
    assert [e.kind for e in events].count("task.resumed") == 1


async def test_a_task_of_an_old_version_finishes_with_it_after_a_new_version_is_built(
    tmp_path,
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "WORKFLOW_EFFECTS": str(tmp_path / "effects.txt"),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    task_id = crash_in_second_layer(env).split()[1]
    sys.path.insert(0, str(CRASHING_HOST.parent))
    try:
        import workflow_host  # version 1, which the task was started with
    finally:
        sys.path.remove(str(CRASHING_HOST.parent))
    old = workflow_host.WORKFLOW

    async def changed(state: workflow_host.Trail) -> dict[str, list[str]]:
        return {"log": ["v2"]}

    newer = Workflow("crash-after-first-layer", workflow_host.Trail, version=2).node(
        "only", changed
    )
    newer.build()  # both versions are registered now
    os.environ["WORKFLOW_EFFECTS"] = str(tmp_path / "effects.txt")
    try:
        settings = AgentSettings(data_dir=tmp_path / "data", recovery="off")
        async with create_kernel(settings) as kernel:
            recovered = await kernel.recover("resume")
            forget("crash-after-first-layer")  # a host that reloads its definitions
            again = await run_workflow(kernel, old, workflow_host.Trail())
            fresh = await run_workflow(kernel, newer, workflow_host.Trail())
    finally:
        del os.environ["WORKFLOW_EFFECTS"]
        forget("crash-after-first-layer", 2)
        old.build()  # the module's definition stays registered for the other tests
    assert [r.task_id for r in recovered] == [task_id]
    assert recovered[0].status is TaskStatus.SUCCEEDED, recovered[0].error
    assert again.status is TaskStatus.SUCCEEDED and again.state is not None
    assert again.state.log == ["first", "second", "third"]  # built again: registered again
    assert fresh.state is not None and fresh.state.log == ["v2"]


async def test_an_agent_node_is_a_child_task_whose_approval_reaches_the_host(tmp_path) -> None:
    asked: list[ApprovalRequest] = []
    paid: list[str] = []

    @tool(capabilities={"write"})  # graded medium: asks the host at this threshold
    def pay(to: str) -> str:
        """Pay someone."""
        paid.append(to)
        return f"paid {to}"

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(request_id=request.request_id, approved=True, decided_by="host")

    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "pay", "arguments": {"to": "plumber"}}]},
                {"content": "The plumber is paid."},
            ]
        )
    )
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        scripted_model_script=script,
        policy_approval_required_risk="medium",
    )
    workflow = Workflow("asks", Notes).agent(
        "ask", lambda s: TaskRequest(task="Pay the plumber"), output="answer"
    )
    async with create_kernel(settings, tools=[pay], approval_callback=approve) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
        spans = [s for s in await kernel.task_spans(result.task_id) if s.kind == "step"]
        child_id = spans[0].attributes["child_task_id"]
        child = await kernel.get_task(child_id)
    assert result.state is not None, result.task.error
    assert result.state.answer == "The plumber is paid."
    assert [r.task_id for r in asked] == [child_id] and paid == ["plumber"]
    assert child.status is TaskStatus.SUCCEEDED
    assert child.request.parent is not None
    assert child.request.parent.task_id == result.task_id
    assert child.request.parent.span_id == spans[0].span_id


async def test_canceling_a_workflow_task_stops_its_running_nodes(settings) -> None:
    entered = anyio.Event()
    stopped: list[str] = []

    async def wait_forever(state: Notes) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            stopped.append("blocked")
            raise

    workflow = Workflow("blocks", Notes).node("blocked", wait_forever)
    async with create_kernel(settings) as kernel:
        outcome = []

        async def run() -> None:
            outcome.append(await run_workflow(kernel, workflow, Notes(), task_id="wf-cancel"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await entered.wait()
            await kernel.cancel_task("wf-cancel", "enough")
        events = await kernel.task_events("wf-cancel")
    assert outcome[0].status is TaskStatus.CANCELED
    assert stopped == ["blocked"]
    finished = [e for e in events if e.kind == "workflow.node_finished"]
    assert [(e.node, e.succeeded) for e in finished] == [("blocked", False)]
    assert "canceled" in (finished[0].error or "")


async def test_a_node_raising_cancelled_itself_fails_naming_it(settings) -> None:
    async def first(state: Notes) -> dict[str, int]:
        return {"count": 1}

    async def bad(state: Notes) -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future  # CancelledError, though nobody canceled the task

    async def beside(state: Notes) -> dict[str, str]:
        return {"verdict": "ran"}

    workflow = (
        Workflow("self-cancel", Notes, allow_fan_out=True)
        .node("first", first)
        .node("bad", bad)
        .node("beside", beside)
        .edge("first", "bad")
        .edge("first", "beside")
    )
    forget(workflow.name)
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.FAILED
    assert "node 'bad' raised CancelledError though nothing canceled" in (result.task.error or "")
    finished = {e.node: e for e in events if e.kind == "workflow.node_finished" and e.layer == 1}
    assert finished.keys() == {"bad", "beside"}
    assert not finished["bad"].succeeded and "CancelledError" in finished["bad"].error
    assert not finished["beside"].succeeded  # its layer failed: not kept
    assert result.state == Notes(count=1)


async def test_a_node_raising_its_own_cancel_with_system_exit_fails_naming_both(settings) -> None:
    # A group holding a CancelledError nobody asked for is no cancel: the task fails.
    async def first(state: Notes) -> dict[str, int]:
        return {"count": 1}

    async def bad(state: Notes) -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        try:
            await future
        except asyncio.CancelledError as own:
            raise BaseExceptionGroup("the node's own", [own, SystemExit(3)]) from None

    workflow = Workflow("self-cancel-exit", Notes).node("first", first).node("bad", bad)
    workflow = workflow.edge("first", "bad")
    forget(workflow.name)
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes(), task_id="wf-mix")
        stored = await kernel.get_task("wf-mix")
    assert result.status is TaskStatus.FAILED and stored.status is TaskStatus.FAILED
    assert "node 'bad' raised CancelledError with SystemExit: 3 though nothing canceled" in (
        stored.error or ""
    )


@pytest.mark.parametrize("anyio_backend", ["trio"])  # asyncio stops its loop at once on it
async def test_ctrl_c_in_a_node_reaches_the_host_as_keyboard_interrupt(settings) -> None:
    # Not wrapped in the run's exception groups, where ``except KeyboardInterrupt`` misses it.
    async def first(state: Notes) -> dict[str, int]:
        return {"count": 1}

    async def pressed(state: Notes) -> None:
        raise KeyboardInterrupt

    async def beside(state: Notes) -> dict[str, str]:
        await anyio.sleep_forever()
        return {"verdict": "ran"}

    workflow = (
        Workflow("ctrl-c", Notes, allow_fan_out=True)
        .node("first", first)
        .node("pressed", pressed)
        .node("beside", beside)
        .edge("first", "pressed")
        .edge("first", "beside")
    )
    forget(workflow.name)
    async with create_kernel(settings) as kernel:
        with pytest.raises(KeyboardInterrupt):
            await run_workflow(kernel, workflow, Notes(), task_id="wf-ctrl-c")
        stored = await kernel.get_task("wf-ctrl-c")
    assert stored.status is TaskStatus.CANCELED


class _Halt(BaseException):
    """A host's own BaseException, outside Exception like SystemExit."""


@pytest.mark.parametrize(
    "raised", [SystemExit(2), _Halt("halted"), GeneratorExit()], ids=lambda e: type(e).__name__
)
async def test_a_node_raising_a_base_exception_fails_the_task_naming_it(
    settings, raised: BaseException
) -> None:
    # Not a cancel (nobody canceled it) nor the host's exit: the node's failure, like any error.
    async def first(state: Notes) -> dict[str, int]:
        return {"count": 1}

    async def bad(state: Notes) -> None:
        raise raised

    async def beside(state: Notes) -> dict[str, str]:
        await anyio.sleep_forever()  # stopped by its sibling's failure
        return {"verdict": "ran"}

    async def end(state: Notes) -> dict[str, str]:
        return {"answer": "reached"}

    workflow = (
        Workflow("base-exit", Notes, allow_fan_out=True)
        .node("first", first)
        .node("bad", bad)
        .node("beside", beside)
        .node("end", end)
        .edge("first", "bad")
        .edge("first", "beside")
        .edge("bad", "end")
        .edge("beside", "end")
    )
    forget(workflow.name)
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes(), task_id="wf-base")
        stored = await kernel.get_task("wf-base")
        events = await kernel.task_events("wf-base")
    name = type(raised).__name__
    assert result.status is TaskStatus.FAILED and stored.status is TaskStatus.FAILED
    (ended,) = [e for e in events if e.kind == "task.failed"]
    assert ended.error_type == "WorkflowNodeError"
    assert f"node 'bad' failed: {name}" in (stored.error or "")
    finished = {e.node: e for e in events if e.kind == "workflow.node_finished" and e.layer == 1}
    assert finished.keys() == {"bad", "beside"}
    assert not finished["bad"].succeeded and name in (finished["bad"].error or "")
    assert not finished["beside"].succeeded
    assert result.state == Notes(count=1)


async def test_an_edge_condition_raising_system_exit_fails_the_node_it_leaves(settings) -> None:
    async def first(state: Notes) -> dict[str, int]:
        return {"count": 1}

    def exits(state: Notes) -> bool:
        raise SystemExit(4)

    workflow = (
        Workflow("exit-edge", Notes)
        .node("first", first)
        .node("then", first)
        .edge("first", "then", when=exits)
    )
    forget(workflow.name)
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
    assert result.status is TaskStatus.FAILED
    assert "choosing the node after 'first' failed: SystemExit: 4" in (result.task.error or "")


async def test_a_tasks_structured_output_is_plain_json_and_other_versions_are_refused(
    settings,
) -> None:
    async def odd(state: Loose) -> dict[str, object]:
        return {"anything": [math.nan, math.inf], "step": 1}

    async def fails(state: Loose) -> None:
        raise RuntimeError("boom")

    first, second = (
        Workflow("versioned", Loose, version=version).node("odd", odd).node("fails", fails)
        for version in (1, 2)
    )
    first.edge("odd", "fails")
    second.edge("odd", "fails")  # the same graph: only the version differs
    forget(first.name)
    forget("plain-out")
    async with create_kernel(settings) as kernel:
        plain = await run_workflow(kernel, Workflow("plain-out", Loose).node("odd", odd), Loose())
        failed = await run_workflow(kernel, first, Loose())
        with pytest.raises(
            UsageError, match="ran version 1 of workflow 'versioned', not version 2"
        ):
            await rerun_workflow(kernel, second, failed.task_id)
        with pytest.raises(UsageError, match="is a task of workflow 'versioned' version 1, not"):
            await workflow_snapshot(kernel, second, failed.task_id)
        with pytest.raises(UsageError, match="is a task of workflow 'versioned' version 1, not"):
            await resume_workflow(kernel, second, failed.task_id)
    assert plain.state is not None and math.isnan(plain.state.anything[0])  # the state keeps it
    assert plain.task.structured_output is not None
    json.dumps(plain.task.structured_output, allow_nan=False)  # hosts get plain JSON
    assert plain.task.structured_output["anything"] == [None, None]
    assert failed.status is TaskStatus.FAILED


async def test_a_state_of_another_type_is_refused_before_any_task(settings) -> None:
    class Other(BaseModel):
        x: int = 0

    async def noop(state: Notes) -> None:
        return None

    async with create_kernel(settings) as kernel:
        with pytest.raises(UsageError, match="runs over Notes, not Other"):
            await run_workflow(kernel, Workflow("jump", Notes).node("a", noop), Other())
        assert await kernel.list_tasks() == []


def _script(tmp_path: Path, steps: list[dict]) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps))
    return script


async def test_an_agent_nodes_events_reach_the_workflows_stream_one_level_down(tmp_path) -> None:
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        scripted_model_script=_script(tmp_path, [{"content": "Done by the agent."}]),
    )
    workflow = Workflow("streams", Notes).agent(
        "ask", lambda s: TaskRequest(task="Say done"), output="answer"
    )
    forget("streams")
    async with create_kernel(settings) as kernel:
        request = workflow_request(workflow, Notes())
        events = [e async for e in kernel.stream_task(request, task_id="wf-stream")]
        child = next(e for e in events if getattr(e, "depth", 0) == 1)
        stored = await kernel.get_task(child.task_id)
        final = await kernel.get_task("wf-stream")
    assert final.status is TaskStatus.SUCCEEDED, final.error
    assert stored.request.parent is not None and stored.request.parent.task_id == "wf-stream"
    assert stored.request.parent.depth == 1
    child_kinds = [e.kind for e in events if e.task_id == child.task_id]
    assert child_kinds[0] == "task.queued" and child_kinds[-1] == "task.succeeded"
    assert all(getattr(e, "depth", 0) == 1 for e in events if e.task_id == child.task_id)
    assert events[-1].task_id == "wf-stream" and events[-1].kind == "task.succeeded"


async def test_canceling_a_workflow_cancels_its_running_agent_node_child(tmp_path) -> None:
    entered = anyio.Event()

    @tool
    async def wait_long(topic: str) -> str:
        """Wait for a long time."""
        entered.set()
        await anyio.sleep_forever()
        return topic

    settings = AgentSettings(
        data_dir=tmp_path / "data",
        scripted_model_script=_script(
            tmp_path,
            [
                {"tool_calls": [{"name": "wait_long", "arguments": {"topic": "x"}}]},
                {"content": "never"},
            ],
        ),
    )
    workflow = Workflow("cancels", Notes).agent(
        "ask", lambda s: TaskRequest(task="Wait"), output="answer"
    )
    forget("cancels")
    async with create_kernel(settings, tools=[wait_long]) as kernel:
        outcome = []

        async def run() -> None:
            outcome.append(await run_workflow(kernel, workflow, Notes(), task_id="wf-c"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await entered.wait()
            await kernel.cancel_task("wf-c", "enough")
        children = [t for t in await kernel.list_tasks() if t.task_id != "wf-c"]
    assert outcome[0].status is TaskStatus.CANCELED
    assert len(children) == 1
    assert children[0].status is TaskStatus.CANCELED
    assert children[0].request.parent is not None
    assert children[0].request.parent.task_id == "wf-c"


async def test_resuming_with_a_changed_definition_of_the_same_name_and_version_is_refused(
    tmp_path,
) -> None:
    effects = tmp_path / "effects.txt"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "WORKFLOW_EFFECTS": str(effects),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    task_id = crash_in_second_layer(env).split()[1]

    class Trail(BaseModel):  # the same state; the graph below is another one
        log: Annotated[list[str], append] = []

    ran: list[str] = []

    async def step(state: Trail) -> dict[str, list[str]]:
        ran.append("step")
        return {"log": ["other"]}

    forget("crash-after-first-layer")
    changed = (
        Workflow("crash-after-first-layer", Trail)
        .node("first", step)
        .node("audit", step)
        .node("third", step)
        .edge("first", "audit")
        .edge("audit", "third")
    )
    try:
        settings = AgentSettings(data_dir=tmp_path / "data", recovery="off")
        async with create_kernel(settings) as kernel:
            with pytest.raises(DefinitionNotLoadedError, match="different definition"):
                await resume_workflow(kernel, changed, task_id)
            stored = await kernel.get_task(task_id)
    finally:
        forget("crash-after-first-layer")
    assert ran == []  # nothing of the other graph ran over the task's checkpoint
    assert stored.status is TaskStatus.RUNNING  # left for a process with its definition


class Bounded(BaseModel):
    log: Annotated[list[str], append] = []
    count: Annotated[int, add] = Field(default=0, le=3)


async def test_a_merge_that_breaks_the_state_fails_every_node_of_its_layer_in_the_events(
    settings,
) -> None:
    async def start(state: Bounded) -> dict[str, list[str]]:
        return {"log": ["start"]}

    async def a(state: Bounded) -> dict[str, int]:
        return {"count": 2}

    async def b(state: Bounded) -> dict[str, int]:
        return {"count": 2}

    workflow = (
        Workflow("overflow", Bounded, allow_fan_out=True)
        .node("start", start)
        .node("a", a)
        .node("b", b)
        .edge("start", "a")
        .edge("start", "b")
    )
    forget("overflow")
    async with create_kernel(settings) as kernel:
        result = await run_workflow(kernel, workflow, Bounded())
        events = await kernel.task_events(result.task_id)
        rerun = await rerun_workflow(kernel, workflow, result.task_id, state=Bounded(count=-5))
    assert result.status is TaskStatus.FAILED
    assert "layer 1 left an invalid state: 'count' (written by 'b')" in result.task.error
    assert result.state == Bounded(log=["start"])  # the last good layer's, nothing merged
    finished = {
        e.node: e.succeeded for e in events if e.kind == "workflow.node_finished" and e.layer == 1
    }
    assert finished == {"a": False, "b": False}  # no node of the layer is left "started"
    assert rerun.status is TaskStatus.SUCCEEDED and rerun.state is not None
    assert rerun.state.count == -1


async def test_a_failing_node_cancels_its_siblings_agent_child_task(tmp_path) -> None:
    entered = anyio.Event()

    @tool
    async def wait_long(topic: str) -> str:
        """Wait for a long time."""
        entered.set()
        await anyio.sleep_forever()
        return topic

    async def broken(state: Notes) -> None:
        await entered.wait()
        raise RuntimeError("broken node")

    settings = AgentSettings(
        data_dir=tmp_path / "data",
        scripted_model_script=_script(
            tmp_path, [{"tool_calls": [{"name": "wait_long", "arguments": {"topic": "x"}}]}]
        ),
    )
    workflow = (
        Workflow("sibling", Notes, allow_fan_out=True)
        .node("start", _nothing_node)
        .agent("ask", lambda s: TaskRequest(task="Wait"), output="answer")
        .node("broken", broken)
        .edge("start", "ask")
        .edge("start", "broken")
    )
    forget("sibling")
    async with create_kernel(settings, tools=[wait_long]) as kernel:
        result = await run_workflow(kernel, workflow, Notes())
        children = [t for t in await kernel.list_tasks() if t.task_id != result.task_id]
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.FAILED
    assert "node 'broken' failed: RuntimeError: broken node" in result.task.error
    assert [c.status for c in children] == [TaskStatus.CANCELED]  # not left running
    finished = {e.node: e.succeeded for e in events if e.kind == "workflow.node_finished"}
    assert finished == {"start": True, "ask": False, "broken": False}


async def _nothing_node(state: Notes) -> None:
    return None


async def test_a_workflow_killed_mid_parallel_layer_merges_each_node_once_on_resume(
    tmp_path,
) -> None:
    effects = tmp_path / "effects.txt"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "WORKFLOW_EFFECTS": str(effects),
        "WORKFLOW_KIND": "parallel",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    task_id = crash_in_second_layer(env).split()[1]
    assert sorted(effects.read_text().split()) == ["begin", "quick", "slow"]

    sys.path.insert(0, str(CRASHING_HOST.parent))
    try:
        import workflow_host
    finally:
        sys.path.remove(str(CRASHING_HOST.parent))
    os.environ["WORKFLOW_EFFECTS"] = str(effects)
    try:
        settings = AgentSettings(data_dir=tmp_path / "data", recovery="off")
        async with create_kernel(settings) as kernel:
            before = await workflow_snapshot(kernel, workflow_host.PARALLEL, task_id)
            result = await resume_workflow(kernel, workflow_host.PARALLEL, task_id)
    finally:
        del os.environ["WORKFLOW_EFFECTS"]
    assert before is not None and before.state.log == ["begin"]  # the layer was not saved
    assert before.next_nodes == ["quick", "slow"]
    assert result.status is TaskStatus.SUCCEEDED, result.task.error
    # The interrupted layer runs again as a whole (its nodes' effects happen again: a node
    # with effects must be idempotent); its updates are merged once.
    assert result.state is not None and result.state.log == ["begin", "quick", "slow", "close"]
    assert effects.read_text().split().count("begin") == 1


def kill_running_host(env: dict[str, str], after_s: float) -> None:
    """Start the host, and kill -9 it ``after_s`` after its run began."""
    with subprocess.Popen(
        [sys.executable, str(CRASHING_HOST)], env=env, stdout=subprocess.PIPE, text=True
    ) as host:
        try:
            assert read_line(host.stdout, timeout=120).startswith("BLOCKED ")
            time.sleep(after_s)  # somewhere in the layers: a commit, a node, a save
        finally:
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=30)


@pytest.mark.parametrize("after_s", [0.0, 0.01, 0.05])
async def test_a_workflow_killed_at_any_moment_of_quick_layers_resumes_exactly(
    tmp_path, after_s: float
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "WORKFLOW_EFFECTS": str(tmp_path / "effects.txt"),
        "WORKFLOW_KIND": "chain",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    kill_running_host(env, after_s)
    sys.path.insert(0, str(CRASHING_HOST.parent))
    try:
        import workflow_host
    finally:
        sys.path.remove(str(CRASHING_HOST.parent))
    settings = AgentSettings(data_dir=tmp_path / "data", recovery="off")
    async with create_kernel(settings) as kernel:
        stored = await kernel.get_task("wf-crash")
        if stored.status is TaskStatus.SUCCEEDED:  # it finished before the kill
            final = await workflow_snapshot(kernel, workflow_host.CHAIN, "wf-crash")
            assert final is not None
            log = final.state.log
        else:
            result = await resume_workflow(kernel, workflow_host.CHAIN, "wf-crash")
            assert result.status is TaskStatus.SUCCEEDED, result.task.error
            assert result.state is not None
            log = result.state.log
    assert log == [str(n) for n in range(150)]


async def test_a_sub_workflows_agent_runs_two_levels_down_and_its_usage_counts_once(
    tmp_path,
) -> None:
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        scripted_model_script=_script(tmp_path, [{"content": "Inner answer."}]),
    )
    inner = Workflow("inner", Notes).agent(
        "ask", lambda s: TaskRequest(task="Answer"), output="answer"
    )
    outer = Workflow("outer", Notes).subworkflow(
        "sub", inner, output=lambda s, final: {"answer": final.answer}
    )
    forget("inner")
    forget("outer")
    async with create_kernel(settings) as kernel:
        events = [e async for e in kernel.stream_task(workflow_request(outer, Notes()))]
        depths = {e.task_id: getattr(e, "depth", 0) for e in events}
        tasks = {d: await kernel.get_task(t) for t, d in depths.items()}
    assert events[-1].kind == "task.succeeded"
    assert sorted(tasks) == [0, 1, 2]  # outer workflow, inner workflow, its agent
    used = tasks[2].usage
    assert used.input_tokens > 0
    assert tasks[1].usage == used and tasks[0].usage == used  # rolled up once per level


async def test_a_workflow_killed_after_its_agent_node_reuses_the_finished_child(
    tmp_path,
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "AGENT_SCRIPTED_MODEL_SCRIPT": str(_script(tmp_path, [{"content": "Asked once."}])),
        "WORKFLOW_EFFECTS": str(tmp_path / "effects.txt"),
        "WORKFLOW_KIND": "agent",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
    }
    task_id = crash_in_second_layer(env).split()[1]
    sys.path.insert(0, str(CRASHING_HOST.parent))
    try:
        import workflow_host
    finally:
        sys.path.remove(str(CRASHING_HOST.parent))
    os.environ["WORKFLOW_EFFECTS"] = str(tmp_path / "effects.txt")
    try:
        settings = AgentSettings(
            data_dir=tmp_path / "data",
            recovery="off",
            scripted_model_script=_script(tmp_path, [{"content": "A second answer!"}]),
        )
        async with create_kernel(settings) as kernel:
            result = await resume_workflow(kernel, workflow_host.ASKING, task_id)
            children = [t for t in await kernel.list_tasks() if t.task_id != task_id]
            child_events = [e.kind for e in await kernel.task_events(children[0].task_id)]
    finally:
        del os.environ["WORKFLOW_EFFECTS"]
    assert result.status is TaskStatus.SUCCEEDED, result.task.error
    assert result.state is not None and result.state.log == ["Asked once."]
    assert len(children) == 1 and children[0].request.parent is not None
    assert child_events.count("task.started") == 1  # it ran once, before the kill
    assert result.task.usage == children[0].usage  # counted once, after the resume too


@pytest.mark.parametrize("session", ["own", "other"])
async def test_an_agent_node_naming_a_session_is_refused_clearly(tmp_path, session) -> None:
    # A nested agent's task never joins a session: its parent's holds the conversation, and
    # the child's usage already counts there through its parent (joining would count it
    # twice in the session's limits, or find the session busy with the parent itself).
    settings = AgentSettings(
        data_dir=tmp_path / "data",
        scripted_model_script=_script(tmp_path, [{"content": "Done by the agent."}]),
    )
    workflow = Workflow("sessions", Notes).agent(
        "ask",
        lambda s: TaskRequest(task="Say done", session_id="会话-1" if session else None),
        output="answer",
    )
    forget("sessions")
    async with create_kernel(settings) as kernel:
        request = workflow_request(
            workflow, Notes(), session_id="会话-1" if session == "own" else None
        )
        result = await kernel.execute_task(request)
        children = [
            task for task in await kernel.list_tasks(limit=50) if task.request.parent is not None
        ]
    assert result.status is TaskStatus.FAILED
    assert "never joins a session" in (result.error or "")
    assert children == []  # refused before any child task was made
