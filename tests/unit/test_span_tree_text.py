"""``core-agent trace``'s tree (``print_span_tree``) shows every stored span once, even when
their parents form a loop or a span names itself (reviewer: imported files whose spans did
that printed an empty tree, while the viewer and ``--json`` showed them)."""

from datetime import UTC, datetime, timedelta

from rich.console import Console

from core_agent.contracts.trace_store import Span
from core_agent.task_views import print_span_tree
from shared.agent_protocol import TaskRequest, TaskState, TaskStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def span(span_id: str, start_ms: float, parent: str | None) -> Span:
    return Span(
        span_id=span_id,
        trace_id="trace",
        task_id="task",
        kind="step",
        name=f"span-{span_id}",
        started_at=T0 + timedelta(milliseconds=start_ms),
        ended_at=T0 + timedelta(milliseconds=start_ms + 5),
        parent_span_id=parent,
    )


def test_a_loop_of_parents_and_a_span_its_own_parent_are_all_shown_once() -> None:
    task = TaskState(
        task_id="task",
        session_id="s",
        trace_id="trace",
        status=TaskStatus.SUCCEEDED,
        request=TaskRequest(task="x"),
        created_at=T0,
        updated_at=T0,
    )
    spans = [
        span("self", 0, "self"),
        span("a", 10, "b"),
        span("b", 12, "a"),
        span("child", 14, "a"),
        span("orphan", 20, "gone"),
    ]
    console = Console(record=True, width=200)
    print_span_tree(console, task, spans)
    text = console.export_text()
    for name in ("self", "a", "b", "child", "orphan"):
        assert text.count(f"span-{name} ") + text.count(f"span-{name}\n") == 1, (name, text)
    # The child stays under its parent.
    lines = text.splitlines()
    (a_line,) = [line for line in lines if "span-a " in line or line.endswith("span-a")]
    (child_line,) = [line for line in lines if "span-child" in line]
    assert child_line.index("span-child") > a_line.index("span-a")
