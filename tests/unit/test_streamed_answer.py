"""How streamed tool-call pieces are put together when servers reuse one id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from providers.openai_wire import StreamedAnswer


def assembled(*chunks: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    answer = StreamedAnswer()
    for parts in chunks:
        answer.take({"choices": [{"index": 0, "delta": {"tool_calls": parts}}]})
    return [(c.id, c.name, c.arguments) for c in answer.tool_calls()]


def whole(call_id: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": call_id, "function": {"name": "write", "arguments": json.dumps(args)}, **extra}


@pytest.mark.parametrize(
    "chunks",
    [
        [[whole("dup", {"p": "a"})], [whole("dup", {"p": "b"})]],  # no index
        [[whole("dup", {"p": "a"}, index=0)], [whole("dup", {"p": "b"}, index=0)]],  # Ollama
        [[whole("dup", {"p": "a"}, index=0)], [whole("dup", {"p": "b"}, index=1)]],
        [[whole("dup", {"p": "a"}), whole("dup", {"p": "b"})]],  # one chunk
    ],
    ids=["no-index", "index-0", "index-0-1", "one-chunk"],
)
def test_two_calls_under_one_id_stay_two(chunks: list[list[dict[str, Any]]]) -> None:
    assert assembled(*chunks) == [("dup", "write", {"p": "a"}), ("dup", "write", {"p": "b"})]


def test_a_call_whose_pieces_all_repeat_its_id_and_name_stays_one() -> None:
    piece = {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}
    assert assembled(
        [piece],
        [{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":'}}],
        [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "1}"}}],
        [piece],  # named again on a closing piece, with nothing more
    ) == [("a", "f", {"x": 1})]


def test_parallel_calls_without_ids_or_arguments_stay_two() -> None:
    piece = {"function": {"name": "now", "arguments": ""}}
    assert assembled([{"index": 0, **piece}], [{"index": 1, **piece}]) == [
        ("call_1", "now", {}),
        ("call_2", "now", {}),
    ]


def test_a_legacy_function_call_named_again_on_its_closing_piece_stays_one() -> None:
    # The deprecated one-call form carries no id: a closing piece repeating the name made a
    # second call with no arguments.
    answer = StreamedAnswer()
    pieces = [
        {"function_call": {"name": "calculator", "arguments": '{"expression": "1+1"}'}},
        {"function_call": {"name": "calculator", "arguments": ""}},
    ]
    for delta in pieces:
        answer.take({"choices": [{"index": 0, "delta": delta}]})
    answer.take({"choices": [{"index": 0, "delta": {}, "finish_reason": "function_call"}]})
    assert [(c.name, c.arguments) for c in answer.tool_calls()] == [
        ("calculator", {"expression": "1+1"})
    ]
