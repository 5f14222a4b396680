"""Spans in tree order: each under its parent, siblings by start time, every span once.

What a trace's readers (``core-agent trace``, the viewer's waterfall) show. A span whose
parent is not stored (the task's root before the task ends, or after a crash) is a root, and
so is one whose parents form a loop or which names itself (a damaged store, an edited
import): nothing stored is left out of the tree.
"""

from __future__ import annotations

from collections.abc import Sequence

from core_agent.contracts.trace_store import Span


def span_tree(spans: Sequence[Span]) -> list[tuple[Span, int]]:
    """Each span with its depth (0 for a root), in tree order."""
    ordered = sorted(spans, key=lambda s: s.started_at)
    known = {span.span_id for span in ordered}
    children: dict[str, list[Span]] = {}
    roots: list[Span] = []
    for span in ordered:
        parent = span.parent_span_id
        if parent is not None and parent in known and parent != span.span_id:
            children.setdefault(parent, []).append(span)
        else:
            roots.append(span)
    placed: set[int] = set()
    rows: list[tuple[Span, int]] = []

    def place(root: Span) -> None:
        stack = [(root, 0)]
        while stack:
            span, depth = stack.pop()
            if id(span) in placed:
                continue
            placed.add(id(span))
            rows.append((span, depth))
            stack.extend((child, depth + 1) for child in reversed(children.get(span.span_id, [])))

    for root in roots:
        place(root)
    for span in ordered:  # only spans in a loop of parents are left
        if id(span) not in placed:
            place(span)
    return rows
