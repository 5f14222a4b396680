"""Trajectories, comparisons and the export format, from records made by hand."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from core_agent.contracts.errors import UsageError
from core_agent.contracts.trace_store import Span
from core_agent.replay.comparison import compare_steps
from core_agent.replay.task_export import ExportReader, TaskExport, export_lines
from core_agent.replay.trajectory import build_trajectory
from shared.agent_protocol import (
    AssistantMessage,
    LLMCompleted,
    StrategySelected,
    TaskQueued,
    TaskRequest,
    TaskState,
    TaskStatus,
    TaskSucceeded,
    TokenUsage,
    ToolCall,
    ToolCompleted,
    ToolResult,
    ToolStarted,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def task(status: TaskStatus = TaskStatus.SUCCEEDED) -> TaskState:
    return TaskState(
        task_id="t1",
        session_id="s1",
        trace_id="r1",
        status=status,
        request=TaskRequest(task="find it"),
        strategy="react",
        created_at=T0,
        updated_at=T0,
    )


def events(result: str = "found", answer: str = "It is found.") -> list:
    call = ToolCall(id="c1", name="search", arguments={"q": "it"})
    made = [
        (
            TaskQueued,
            {"session_id": "s1", "trace_id": "r1", "request": TaskRequest(task="find it")},
        ),
        (StrategySelected, {"strategy": "react", "reason": "one goal"}),
        (
            LLMCompleted,
            {
                "model": "m",
                "message": AssistantMessage(tool_calls=(call,)),
                "usage": TokenUsage(input_tokens=5, output_tokens=2),
                "latency_ms": 1.0,
            },
        ),
        (ToolStarted, {"tool_call": call}),
        # Announced again after a human's answer: the same call, not another step.
        (ToolStarted, {"tool_call": call}),
        (
            ToolCompleted,
            {"result": ToolResult(call_id="c1", name="search", content=result), "latency_ms": 3},
        ),
        (
            LLMCompleted,
            {
                "model": "m",
                "message": AssistantMessage(content=answer),
                "usage": TokenUsage(input_tokens=9, output_tokens=4),
                "latency_ms": 1.0,
            },
        ),
        (TaskSucceeded, {"output": answer, "usage": TokenUsage(input_tokens=14, output_tokens=6)}),
    ]
    return [
        kind(event_id=f"e{n}", task_id="t1", seq=n, occurred_at=at(n), **fields)
        for n, (kind, fields) in enumerate(made, start=1)
    ]


def retrieval_span() -> Span:
    return Span(
        span_id="sp1",
        trace_id="r1",
        task_id="t1",
        kind="retrieval",
        name="knowledge.search",
        started_at=at(5.2),  # after the call started (event 5), before its result (event 6)
        ended_at=at(5.4),
        attributes={"query": "it", "hits": 2},
    )


def test_steps_are_numbered_in_order_with_a_retrieval_where_it_happened() -> None:
    trajectory = build_trajectory(task(), events(), [retrieval_span()])
    assert [(s.number, s.kind) for s in trajectory.steps] == [
        (1, "route"),
        (2, "model"),
        (3, "tool_call"),
        (4, "retrieval"),
        (5, "tool_result"),
        (6, "model"),
        (7, "answer"),
    ]
    assert trajectory.steps[3].data["attributes"] == {"query": "it", "hits": 2}
    assert trajectory.steps[3].key is None  # shown, not compared
    assert trajectory.steps[2].key == {
        "name": "search",
        "arguments": {"q": "it"},
        "raw_arguments": None,
    }


def test_the_first_difference_is_one_step_on_each_side_with_a_diff() -> None:
    a = build_trajectory(task(), events()).compared
    b = build_trajectory(task(), events(result="lost", answer="Not found.")).compared
    compared = compare_steps(a, b)
    assert compared.matching_steps == 3
    first = compared.first_difference
    assert first is not None
    assert [s.kind for s in first.a] == [s.kind for s in first.b] == ["tool_result"]
    assert '-  "content": "found",' in first.diff
    assert '+  "content": "lost",' in first.diff
    assert len(compared.differences) == 1  # the result, the answer turn and the answer
    assert [s.kind for s in compared.differences[0].a] == ["tool_result", "model", "answer"]


def test_a_step_only_one_side_has_is_an_insertion() -> None:
    a = build_trajectory(task(), events()).compared
    b = [*a[:2], a[2], *a[2:]]  # the call made twice
    compared = compare_steps(a, b)
    assert compared.first_difference is not None
    assert [d.change for d in compared.differences] == ["insert"]
    assert compare_steps(a, a).first_difference is None


def exported_lines() -> list[str]:
    return list(export_lines(TaskExport(task(), events(), [retrieval_span()])))


def test_an_export_reads_back_as_it_was() -> None:
    lines = exported_lines()
    assert [json.loads(line)["type"] for line in lines] == [
        "export",
        "task",
        *["event"] * 8,
        "span",
    ]
    back = ExportReader("x.jsonl").read(lines)
    assert back.task == task()
    assert back.events == events()
    assert back.spans == [retrieval_span()]


def _edit(lines: list[str], index: int, **changes) -> list[str]:
    record = json.loads(lines[index])
    record.update(changes)
    return [*lines[:index], json.dumps(record), *lines[index + 1 :]]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda lines: [], "x.jsonl: empty"),
        (lambda lines: ["[1, 2]"], "x.jsonl line 1: not a JSON object"),
        (lambda lines: lines[1:], "x.jsonl line 1: not a core-agent task export"),
        (lambda lines: _edit(lines, 0, version=2), "format version 2 is newer"),
        (lambda lines: _edit(lines, 3, version=None), "x.jsonl line 4: no format version"),
        (lambda lines: lines[:-1], "cut short or was edited"),
        (lambda lines: [lines[0], *lines[2:]], "no task record"),
        (lambda lines: _edit(lines, 3, type="note"), "x.jsonl line 4: unknown record type"),
        (
            lambda lines: _edit(lines, 4, event={"kind": "tool.completed"}),
            "x.jsonl line 5: ",
        ),
        (lambda lines: [*lines[:2], lines[3], lines[2], *lines[4:]], "must begin with its"),
    ],
)
def test_a_bad_export_is_refused_saying_where(mutate, message) -> None:
    with pytest.raises(UsageError) as refused:
        ExportReader("x.jsonl").read(mutate(exported_lines()))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_task_that_has_not_ended_is_not_imported() -> None:
    lines = list(export_lines(TaskExport(task(TaskStatus.RUNNING), events(), [])))
    with pytest.raises(UsageError, match="is running: only a task that has ended"):
        ExportReader("x.jsonl").read(lines)


def test_calls_of_one_turn_compare_in_the_order_the_model_asked_for_them() -> None:
    first, second = (
        ToolCall(id="a", name="search", arguments={"q": "a"}),
        ToolCall(id="b", name="search", arguments={"q": "b"}),
    )

    def run(finishing: list[ToolCall]) -> list:
        made = [
            (TaskQueued, {"session_id": "s1", "trace_id": "r1", "request": TaskRequest(task="x")}),
            (
                LLMCompleted,
                {
                    "model": "m",
                    "message": AssistantMessage(tool_calls=(first, second)),
                    "usage": TokenUsage(),
                    "latency_ms": 1.0,
                },
            ),
            (ToolStarted, {"tool_call": first}),
            (ToolStarted, {"tool_call": second}),
            *[
                (
                    ToolCompleted,
                    {
                        "result": ToolResult(call_id=c.id, name=c.name, content=c.id),
                        "latency_ms": 1,
                    },
                )
                for c in finishing
            ],
        ]
        return [
            kind(event_id=f"e{n}", task_id="t1", seq=n, occurred_at=at(n), **fields)
            for n, (kind, fields) in enumerate(made, start=1)
        ]

    in_order = build_trajectory(task(), run([first, second]))
    reversed_ = build_trajectory(task(), run([second, first]))
    assert [s.data.get("content") for s in reversed_.steps if s.kind == "tool_result"] == [
        "b",
        "a",
    ]  # shown as it happened
    assert compare_steps(in_order.compared, reversed_.compared).first_difference is None
    assert [(s.kind, s.data.get("call_id")) for s in reversed_.compared] == [
        ("model", None),
        ("tool_call", "a"),
        ("tool_result", "a"),
        ("tool_call", "b"),
        ("tool_result", "b"),
    ]


def _numbered(made: list) -> list:
    return [
        kind(event_id=f"e{n}", task_id="t1", seq=n, occurred_at=at(n), **fields)
        for n, (kind, fields) in enumerate(made, start=1)
    ]


def _turn(*calls: ToolCall) -> tuple:
    return (
        LLMCompleted,
        {
            "model": "m",
            "message": AssistantMessage(tool_calls=calls),
            "usage": TokenUsage(),
            "latency_ms": 1.0,
        },
    )


def _result(call: ToolCall, content: str) -> tuple:
    return (
        ToolCompleted,
        {"result": ToolResult(call_id=call.id, name=call.name, content=content), "latency_ms": 1},
    )


@pytest.mark.parametrize("side_by_side", [True, False])
def test_calls_sharing_an_id_are_each_a_step(side_by_side) -> None:
    # Plan steps running side by side each number their calls from call_1_1 (reviewer: one
    # step's "tool call calculator(2+2)" was missing while its policy and result were
    # listed); and one model turn may give two calls the same id.
    b = ToolCall(id="call_1_1", name="calculator", arguments={"expression": "1+1"})
    c = ToolCall(id="call_1_1", name="calculator", arguments={"expression": "2+2"})
    queued = (TaskQueued, {"session_id": "s1", "trace_id": "r1", "request": TaskRequest(task="x")})
    if side_by_side:
        made = [queued, _turn(b), _turn(c), (ToolStarted, {"tool_call": b})]
        made += [(ToolStarted, {"tool_call": c}), _result(b, "2"), _result(c, "4")]
    else:
        made = [queued, _turn(b, c), (ToolStarted, {"tool_call": b})]
        made += [(ToolStarted, {"tool_call": c}), _result(b, "2"), _result(c, "4")]
    trajectory = build_trajectory(task(), _numbered(made))
    calls = [s.data["arguments"] for s in trajectory.steps if s.kind == "tool_call"]
    assert calls == [{"expression": "1+1"}, {"expression": "2+2"}]


def test_two_identical_calls_of_one_turn_are_two_steps_and_a_repeat_is_none() -> None:
    dup = ToolCall(id="dup", name="search", arguments={"q": "it"})
    queued = (TaskQueued, {"session_id": "s1", "trace_id": "r1", "request": TaskRequest(task="x")})
    made = [queued, _turn(dup, dup), (ToolStarted, {"tool_call": dup})]
    made += [(ToolStarted, {"tool_call": dup}), _result(dup, "1"), _result(dup, "2")]
    steps = build_trajectory(task(), _numbered(made)).steps
    assert [s.kind for s in steps].count("tool_call") == 2
    # One call, announced again after a human's answer: one step.
    again = [queued, _turn(dup), (ToolStarted, {"tool_call": dup})]
    again += [(ToolStarted, {"tool_call": dup}), _result(dup, "1")]
    steps = build_trajectory(task(), _numbered(again)).steps
    assert [s.kind for s in steps].count("tool_call") == 1


def test_a_task_left_running_sums_what_its_model_steps_used() -> None:
    # Reviewer: a crashed task still "running" summed "tokens 0 in / 0 out" under steps that
    # showed tokens (its usage is stored with its end).
    from rich.console import Console

    from core_agent.replay.rendering import print_trajectory

    left = [e for e in events() if e.kind != "task.succeeded"]
    trajectory = build_trajectory(task(TaskStatus.RUNNING), left)
    console = Console(record=True, width=200)
    print_trajectory(console, trajectory)
    assert "tokens 14 in / 6 out" in console.export_text()
