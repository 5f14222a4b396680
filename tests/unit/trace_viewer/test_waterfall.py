"""Spans placed as a waterfall: tree order, bars in time."""

from datetime import UTC, datetime, timedelta

import pytest

from core_agent.contracts.trace_store import Span
from core_agent.trace_viewer.waterfall import MIN_BAR_PERCENT, waterfall

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def span(span_id: str, start_ms: float, end_ms: float, parent: str | None = None, **more) -> Span:
    return Span(
        span_id=span_id,
        trace_id="trace",
        task_id="task",
        kind=more.pop("kind", "step"),
        name=span_id,
        started_at=T0 + timedelta(milliseconds=start_ms),
        ended_at=T0 + timedelta(milliseconds=end_ms),
        parent_span_id=parent,
        **more,
    )


def test_children_follow_their_parent_in_start_order() -> None:
    placed = waterfall(
        [
            span("second-child", 60, 90, "task"),
            span("task", 10, 100, kind="task"),
            span("route", 0, 10, kind="planning"),
            span("first-child", 20, 50, "task"),
            span("grandchild", 25, 30, "first-child"),
        ]
    )
    assert [(r.span.span_id, r.depth) for r in placed.rows] == [
        ("route", 0),
        ("task", 0),
        ("first-child", 1),
        ("grandchild", 2),
        ("second-child", 1),
    ]
    assert placed.total_ms == 100


def test_bars_start_and_last_as_their_spans_did() -> None:
    rows = {r.span.span_id: r for r in waterfall([span("a", 0, 100), span("b", 25, 75)]).rows}
    assert (rows["a"].offset_percent, rows["a"].width_percent) == (0, 100)
    assert (rows["b"].offset_percent, rows["b"].width_percent) == (25, 50)
    assert rows["b"].start_ms == 25


def test_an_instant_step_still_shows_and_no_bar_runs_past_the_end() -> None:
    rows = waterfall([span("a", 0, 1000), span("blink", 1000, 1000)]).rows
    blink = rows[1]
    assert blink.width_percent == pytest.approx(MIN_BAR_PERCENT)
    assert blink.offset_percent + blink.width_percent <= 100
    alone = waterfall([span("only", 5, 5)]).rows[0]
    assert alone.width_percent > 0 and alone.offset_percent + alone.width_percent <= 100


def test_a_damaged_tree_still_shows_every_span_once() -> None:
    placed = waterfall(
        [
            span("orphan", 0, 10, "gone"),  # its parent was never written (a crash)
            span("self", 5, 10, "self"),
            span("a", 10, 20, "b"),
            span("b", 12, 20, "a"),  # a loop of parents
        ]
    )
    ids = [r.span.span_id for r in placed.rows]
    assert sorted(ids) == ["a", "b", "orphan", "self"]
    assert placed.rows[0].depth == 0


def test_attributes_are_shown_whole_up_to_a_limit() -> None:
    short = waterfall([span("a", 0, 1, attributes={"prompt": "你好"})]).rows[0]
    assert '"prompt": "你好"' in short.attributes
    long = waterfall([span("a", 0, 1, attributes={"answer": "x" * 10_000})]).rows[0]
    assert long.attributes.endswith("more characters)") and len(long.attributes) < 4100


def test_no_spans_no_rows() -> None:
    assert waterfall([]).rows == []
