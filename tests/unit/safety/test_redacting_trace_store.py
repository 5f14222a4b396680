"""A span searched as one JSON text is stored as the search of each of its strings leaves it.

``RedactingTraceStore`` with ``scan_whole_payload`` lets a span through unchanged when the
search of its attributes' JSON finds nothing; these tests hold that shortcut to the search
of each string it skips: same rows, whatever the secrets and the texts around them.
"""

import re
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import to_json

from core_agent.contracts.trace_store import ITraceStore, Span, TraceRecording
from core_agent.safety.redacting_stores import RedactingTraceStore
from core_agent.safety.redaction import KEY_FORMATS, Redactor
from fakes.stores import FakeTraceStore

MOMENT = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

# What JSON escapes or leaves as it is: quotes, backslashes, controls, non-ASCII, separators.
AWKWARD = ['"', "\\", "\t", "\n", "\x00", "\x7f", "\u2028", "é", "中文", "😀", ",", ":", "{", "]"]
ANCHORS = ["sk-", "_live_", "_test_", "eyJ", "AKIA", "Bearer ", "bearer\t", "-----BEGIN"]
PLAIN = ["plain words ", "中文的句子", "x" * 30]


class CappedTraceStore(FakeTraceStore):
    """Spans in a list, with a content cap of ``cap`` characters."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self._cap = cap

    @property
    def recording(self) -> TraceRecording:
        return TraceRecording(content_max_chars=self._cap)


def stored(store: ITraceStore, inner: FakeTraceStore, span: Span) -> tuple[bytes, str, Any]:
    anyio.run(store.record, span)
    (kept,) = inner.spans
    # As the SQLite store writes the payload.
    return to_json(kept.attributes, fallback=str), kept.name, kept.error


KEYS = st.sampled_from(KEY_FORMATS).flatmap(lambda f: st.from_regex(f, fullmatch=True))
# Host secrets (any text of 8 characters or more) with something JSON escapes, or a key's.
secrets = st.builds(
    "{}{}{}".format,
    st.text(min_size=4, max_size=6),
    st.sampled_from([*AWKWARD, *ANCHORS]),
    st.text(min_size=4, max_size=6),
)


def texts(literals: list[str]) -> st.SearchStrategy[str]:
    pieces = st.sampled_from([*AWKWARD, *ANCHORS, *PLAIN]) | st.text(max_size=6) | KEYS
    pieces = st.sampled_from(literals) | pieces  # as often as all the rest
    return st.lists(pieces, max_size=6).map("".join)


def attributes(literals: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    text = texts(literals)
    leaf = text | st.integers() | st.none() | st.booleans() | st.floats(allow_nan=False)
    value = st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(text, inner, max_size=3)
        ),
        max_leaves=6,
    )
    return st.dictionaries(text, value, min_size=1, max_size=4)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_a_span_searched_whole_is_stored_as_a_search_of_each_string_stores_it(
    data: st.DataObject,
) -> None:
    literals = data.draw(st.lists(secrets, min_size=1, max_size=2))
    span = Span(
        span_id="s",
        trace_id="t",
        task_id="task",
        kind="tool",
        name=data.draw(texts(literals)),
        started_at=MOMENT,
        ended_at=MOMENT,
        error=data.draw(st.none() | texts(literals)),
        attributes=data.draw(attributes(literals)),
    )
    cap = data.draw(st.sampled_from([4000, 40, 8]) | st.integers(1, 120))
    redactor = Redactor(literals)
    rows = []
    for whole in (True, False):
        inner = CappedTraceStore(cap)
        store = RedactingTraceStore(inner, redactor, scan_whole_payload=whole)
        rows.append(stored(store, inner, span))
    assert rows[0] == rows[1]


HOST = ["tab\there-4471", "back\\slash-5521", "new\nline-6610", 'quo"te-7781', "中文密码口令-8891"]


@pytest.mark.parametrize(
    ("attributes", "cap"),
    [
        *(({"result": f"the secret: {secret}."}, 4000) for secret in HOST),
        ({"result": ["x" * 12]}, 20),  # the payload's JSON at the cap exactly
        ({"result": ["x" * 13]}, 12),  # the text one over it
        ({"result": "中" * 13}, 12),
        ({"tab\there-4471": "a secret as a name", "n": 1}, 4000),  # names are not searched
        ({"a": "tab\th", "b": "ere-4471"}, 4000),  # a secret split in two: harmless texts
        ({"nested": [{"deep": ("sk-proj-" + "Rt5" * 10,)}], "ok": True}, 4000),
    ],
)
def test_a_span_is_stored_as_a_search_of_each_string_stores_it(
    attributes: dict[str, Any], cap: int
) -> None:
    span = Span(
        span_id="s",
        trace_id="t",
        task_id="task",
        kind="tool",
        name="fetch",
        started_at=MOMENT,
        ended_at=MOMENT,
        attributes=attributes,
    )
    rows = []
    for whole in (True, False):
        inner = CappedTraceStore(cap)
        store = RedactingTraceStore(inner, Redactor(HOST), scan_whole_payload=whole)
        rows.append(stored(store, inner, span))
    assert rows[0] == rows[1]


@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_the_built_in_key_formats_match_a_key_whatever_surrounds_it(key_format: str) -> None:
    # The whole-payload search finds a key in a span's JSON text only because no shipped
    # format looks at what is around it (text bounds, word bounds, look-arounds).
    # (A caret that opens a character class negates it: that is not a bound.)
    assert not re.search(r"(?<!\[)\^|\$|\\[AZbB]|\(\?<?[=!]", key_format)


def test_a_redactor_with_user_patterns_is_searched_string_by_string() -> None:
    # Whoever builds the store (the container, or a host overriding the redactor), a user's
    # pattern turns the whole-text search off: ``^PIN\\d+$`` matches a whole string only,
    # never inside the span's JSON text.
    redactor = Redactor([], [r"^PIN\d+$"])
    assert not redactor.searches_json_whole and Redactor().searches_json_whole
    inner = CappedTraceStore(4000)
    store = RedactingTraceStore(inner, redactor, scan_whole_payload=True)
    span = Span(
        span_id="s1",
        trace_id="t1",
        task_id="task",
        kind="tool",
        name="lookup",
        started_at=MOMENT,
        ended_at=MOMENT,
        status="ok",
        attributes={"result": "PIN4242"},
    )
    assert stored(store, inner, span)[0] == b'{"result":"[REDACTED]"}'
