"""The redactor finds the secrets that must never be stored."""

import pytest

from core_agent.contracts.errors import ConfigurationError
from core_agent.safety.redaction import (
    KEY_FORMATS,
    MARK,
    SHORTEST_KEY_FORMAT,
    Redactor,
    host_secrets,
)
from shared.agent_protocol import ToolCall, ToolStarted

KEYS = [
    "sk-proj-" + "a1B2c3D4" * 5,
    "sk-ant-api03-" + "x" * 30,
    "ghp_" + "A" * 36,
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "AIza" + "b" * 35,
    "xoxb-1234567890-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----",
]


@pytest.mark.parametrize("key", KEYS)
def test_well_known_key_formats_are_redacted(key: str) -> None:
    assert Redactor().text(f"the key is {key}, keep it") == f"the key is {MARK}, keep it"


def test_the_hosts_credential_variables_are_found_and_paths_are_not() -> None:
    found = host_secrets(
        {
            "OPENAI_API_KEY": "not-a-known-format-1234",
            "GH_TOKEN": "token-value-5678",
            "DB_PASSWORD": "hunter2hunter2",
            "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
            "AWS_REGION": "eu-west-1",
            "HOME": "/root",
            "SHORT_KEY": "abc",
        }
    )
    assert sorted(found) == ["hunter2hunter2", "not-a-known-format-1234", "token-value-5678"]


def test_literal_secrets_and_configured_patterns_are_redacted() -> None:
    redactor = Redactor(["not-a-known-format-1234"], [r"ACME-\d{6}"])
    text = "use not-a-known-format-1234 with ACME-123456 please"
    assert redactor.text(text) == f"use {MARK} with {MARK} please"


def test_models_are_redacted_deeply_and_left_alone_when_clean() -> None:
    redactor = Redactor(["not-a-known-format-1234"])
    event = ToolStarted(
        event_id="e",
        task_id="t",
        seq=1,
        occurred_at="2026-01-01T00:00:00Z",
        tool_call=ToolCall(
            id="c", name="fetch", arguments={"url": "https://x?k=not-a-known-format-1234"}
        ),
    )
    cleaned = redactor.model(event)
    assert cleaned.tool_call.arguments == {"url": f"https://x?k={MARK}"}
    clean = event.model_copy(update={"tool_call": ToolCall(id="c", name="f", arguments={})})
    assert redactor.model(clean) is clean


def test_a_broken_pattern_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="AGENT_REDACT_PATTERNS"):
        Redactor(patterns=["(unclosed"])


def test_texts_too_short_for_any_secret_are_let_through_but_none_is_missed() -> None:
    import re._parser as parser  # the width of a pattern: the standard parser's own

    # Every shipped format needs at least SHORTEST_KEY_FORMAT characters...
    assert min(parser.parse(f).getwidth()[0] for f in KEY_FORMATS) == SHORTEST_KEY_FORMAT
    # ... so a short text is not searched, but the shortest secret is still found,
    shortest = "xoxb-" + "1" * 10
    assert len(shortest) == SHORTEST_KEY_FORMAT
    assert Redactor().text(shortest) == MARK
    # as are a literal secret of the least length, and what a short user pattern matches.
    assert Redactor(["hunter22"]).text("pw hunter22") == f"pw {MARK}"
    assert Redactor(patterns=[r"\bPIN\d{2}\b"]).text("PIN42") == MARK
    assert Redactor(patterns=iter([r"\d{3}"])).text("a 123") == f"a {MARK}"


@pytest.mark.parametrize("key_format", KEY_FORMATS)
def test_no_key_the_formats_match_slips_past_the_quick_check(key_format: str) -> None:
    # The redactor runs its patterns only over texts holding one of KEY_FORMAT_ANCHORS (or
    # "bearer" in any case): every key a shipped format matches must still be replaced.
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    redactor = Redactor()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.from_regex(key_format, fullmatch=True))
    def check(key: str) -> None:
        assert redactor.contains_secret(f"note: {key} ")
        assert key not in redactor.text(f"note: {key} ")

    check()
