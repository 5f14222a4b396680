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
