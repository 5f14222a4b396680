"""A JSON text is decoded, and its values redacted by their names, for every secret name."""

import json

import pytest

from core_agent.safety.redaction import Redactor


@pytest.mark.parametrize("name", ["password", "secrets", "credentials", "client_secret"])
def test_a_list_or_object_under_any_secret_name_is_redacted(
    name: str,
) -> None:
    """``{"password": {...}}`` or ``{"secrets": [...]}``: the member format takes only strings
    and numbers, so the values are redacted by their name once the JSON is decoded, which
    every secret name must lead to (as ``"api_token"`` did)."""
    redactor = Redactor()
    for value in (["hunter2hunter2", "s3cr3t-0002"], {"value": "hunter2hunter2"}):
        stored = redactor.text(json.dumps({"note": "deploy settings", name: value}))
        assert "hunter2hunter2" not in stored, stored


TOKENS = [f"tok9{i:02d}f8e7d6c5b4a3z" for i in range(3)]


def test_a_list_under_a_secret_name_in_json_cut_short_is_redacted_to_its_end() -> None:
    text = json.dumps({"lead": "x", "api_token": TOKENS, "log": "line " * 20})
    for end in range(text.index("["), len(text)):
        stored = Redactor().text(text[:end])
        assert not any(token[:12] in stored for token in TOKENS), stored


def test_a_cut_never_starts_inside_a_list_under_a_secret_name() -> None:
    """Its tail would hold the list's last items with no name to redact them by."""
    text = json.dumps({"lead": "x", "api_token": TOKENS, "log": "line " * 2000})
    start, end = Redactor().secret_spans(text)[0]
    assert text[start:].startswith('"api_token"') and text[end - 1] == "]"


def test_a_list_under_an_ordinary_name_is_left_alone() -> None:
    text = json.dumps({"items": TOKENS, "log": "line " * 20})[:60]
    assert Redactor().text(text) == text


def test_an_empty_list_under_a_secret_name_is_left_as_it_is() -> None:
    """As a decoded one is: nothing to hide, and the shape of the data says something."""
    for text in ('{"secrets": [], "log": "li', '{"secrets": { }, "log": "li'):
        assert Redactor().text(text) == text


def test_text_nested_past_pythons_stack_after_a_secret_name_is_not_an_error() -> None:
    text = "password: " + "[" * 5000  # a page's text: JSON decoding must not raise
    assert Redactor().text(text).startswith("password: ")


def test_a_list_under_a_secret_name_left_open_is_redacted_from_its_first_character() -> None:
    assert Redactor().text('{"password": [x') == '{"password": "[REDACTED]"'
