"""How a text too long for where it goes is cut: its head and tail around a marker.

A tool result cut for the model, a tool result cut again for a session's history, the head
of a result shown in an error: the cut text is what the stores keep (the conversation, the
event, the span, the session), redacted as they store it. A cut through a secret would keep
a part of it that redaction no longer recognises (the head of a key, a label with the start
of its value), so, given where the stores' redaction finds secrets (``Redactor.secret_spans``),
no cut falls inside one: each secret is kept whole, to be redacted, or left out whole.

Only the text around each cut point is searched (``SPAN_WINDOW`` on each side), so a tool
result of megabytes costs what a short one does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

SecretSpans = Callable[[str], Sequence[tuple[int, int]]]
"""Where a text holds secrets, ``(start, end)`` each (``Redactor.secret_spans``)."""

SPAN_WINDOW = 16_384
"""Characters searched on each side of a cut: longer than any key or token the redactor knows
(a PEM private key of 4,096 bits is about 3,300). A list under a secret-named JSON member
that opens further back than this is not seen: a tail may start inside it."""

OBSERVATION_MARKER = "\n[... {n} characters truncated ...]\n"


def truncate_observation(text: str, limit: int, secrets: SecretSpans | None = None) -> str:
    """A tool result for the model: ``cut_middle`` with the observation marker."""
    return cut_middle(text, limit, OBSERVATION_MARKER, secrets)


def cut_middle(text: str, limit: int, marker: str, secrets: SecretSpans | None = None) -> str:
    """``text`` if short enough, else its head and tail around ``marker``, within ``limit``.

    ``marker`` holds ``{n}``, the count of characters left out. With ``secrets``, the head
    ends before any secret the cut would split and the tail starts after it (the kept text
    is shorter by what is moved).
    """
    if len(text) <= limit:
        return text
    keep = max(limit - len(marker.format(n=len(text))), 0)
    head, tail = keep - keep // 2, keep // 2
    start = len(text) - tail
    if secrets is not None:
        head = _outside(text, head, secrets, back=True)
        start = _outside(text, start, secrets, back=False)
    return text[:head] + marker.format(n=start - head) + text[start:]


def head_of(text: str, limit: int, secrets: SecretSpans | None = None) -> str:
    """The first ``limit`` characters of ``text``, ending before a secret they would split."""
    if len(text) <= limit:
        return text
    end = _outside(text, limit, secrets, back=True) if secrets is not None else limit
    return text[:end]


def _outside(text: str, at: int, secrets: SecretSpans, *, back: bool) -> int:
    """``at``, moved to the edge of every secret around it (secrets may overlap)."""
    if at <= 0 or at >= len(text):
        return at
    low = max(at - SPAN_WINDOW, 0)
    spans = [(start + low, end + low) for start, end in secrets(text[low : at + SPAN_WINDOW])]
    moved = True
    while moved:
        moved = False
        for start, end in spans:
            if start < at < end:
                at = start if back else end
                moved = True
    return at
