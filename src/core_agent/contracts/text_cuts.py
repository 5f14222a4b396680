"""How a tool result too long for the model is cut: its head and tail around a marker.

The cut text is what the model reads and what the stores keep (the conversation, the event,
the span), redacted as they store it. A cut through a secret would keep a part of it that
redaction no longer recognises (the head of a key, a label with the start of its value),
so, given where the stores' redaction finds secrets (``Redactor.secret_spans``), neither
cut falls inside one: each secret is kept whole, to be redacted, or left out whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

SecretSpans = Callable[[str], Sequence[tuple[int, int]]]
"""Where a text holds secrets, ``(start, end)`` each (``Redactor.secret_spans``)."""

_MARKER = "\n[... {n} characters truncated ...]\n"


def truncate_observation(text: str, limit: int, secrets: SecretSpans | None = None) -> str:
    """``text`` if short enough, else its head and tail around a marker, within ``limit``.

    With ``secrets``, the head ends before any secret the cut would split and the tail
    starts after it (the kept text is shorter by what is moved).
    """
    if len(text) <= limit:
        return text
    keep = max(limit - len(_MARKER.format(n=len(text))), 0)
    head, tail = keep - keep // 2, keep // 2
    start = len(text) - tail
    if secrets is not None:
        spans = secrets(text)
        head, start = _outside(spans, head, back=True), _outside(spans, start, back=False)
    return text[:head] + _MARKER.format(n=start - head) + text[start:]


def head_of(text: str, limit: int, secrets: SecretSpans | None = None) -> str:
    """The first ``limit`` characters of ``text``, ending before a secret they would split."""
    if len(text) <= limit:
        return text
    return text[: _outside(secrets(text), limit, back=True) if secrets is not None else limit]


def _outside(spans: Sequence[tuple[int, int]], at: int, *, back: bool) -> int:
    """``at``, moved to the edge of every span it falls inside (spans may overlap)."""
    moved = True
    while moved:
        moved = False
        for start, end in spans:
            if start < at < end:
                at = start if back else end
                moved = True
    return at
