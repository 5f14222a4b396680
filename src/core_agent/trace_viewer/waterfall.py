"""A task's spans as a waterfall: one row per span, children under their parent, bars in time.

Each bar starts where its span started and is as long as it lasted, both as a share of the
whole trace (from the first start to the last end), so nested and parallel steps line up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core_agent.contracts.trace_store import Span
from core_agent.observability.span_tree import span_tree

MIN_BAR_PERCENT = 0.3
"""A step too short to see still gets a sliver of a bar."""
ATTRIBUTE_CHARS = 4000
"""Attributes shown under a span up to here (recorded prompts and answers can be long)."""


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One span placed in the waterfall.

    Attributes:
        span: The span.
        depth: How many ancestors it has in the tree (0 for a root).
        start_ms: When it started, from the start of the trace.
        offset_percent: Where its bar starts, as a share of the trace's length.
        width_percent: How long its bar is, likewise.
        attributes: Its attributes as indented JSON, cut at ``ATTRIBUTE_CHARS`` ("" if none).
    """

    span: Span
    depth: int
    start_ms: float
    offset_percent: float
    width_percent: float
    attributes: str


@dataclass(frozen=True, slots=True)
class Waterfall:
    """The rows in tree order, and the trace's length (first start to last end)."""

    rows: list[WaterfallRow]
    total_ms: float


def waterfall(spans: Sequence[Span]) -> Waterfall:
    """Place ``spans`` in tree order (each under its parent, siblings by start time).

    A span whose parent is not among ``spans`` is a root, and so is one caught in a loop of
    parents (a damaged store), so every span is shown exactly once.
    """
    if not spans:
        return Waterfall([], 0.0)
    ordered = sorted(spans, key=lambda s: s.started_at)
    start = ordered[0].started_at
    end = max(span.ended_at for span in ordered)
    total_ms = max((end - start).total_seconds() * 1000.0, 0.001)
    rows = [_row(span, depth, start, total_ms) for span, depth in span_tree(ordered)]
    return Waterfall(rows, total_ms)


def _row(span: Span, depth: int, start: datetime, total_ms: float) -> WaterfallRow:
    start_ms = (span.started_at - start).total_seconds() * 1000.0
    offset = min(max(start_ms / total_ms * 100.0, 0.0), 100.0 - MIN_BAR_PERCENT)
    width = min(max(span.latency_ms / total_ms * 100.0, MIN_BAR_PERCENT), 100.0 - offset)
    attributes = ""
    if span.attributes:
        attributes = json.dumps(span.attributes, indent=2, ensure_ascii=False, default=str)
        if len(attributes) > ATTRIBUTE_CHARS:
            left_out = len(attributes) - ATTRIBUTE_CHARS
            attributes = f"{attributes[:ATTRIBUTE_CHARS]}… ({left_out} more characters)"
    return WaterfallRow(span, depth, start_ms, offset, width, attributes)
