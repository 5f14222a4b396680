"""The redactor finds the secrets that must never be stored."""

import json
from datetime import UTC, datetime

import pytest

from core_agent.contracts.errors import ConfigurationError
from core_agent.safety.redaction import (
    KEY_FORMAT_ANCHORS,
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
    shortest = "密码:" + "1" * 4
    assert len(shortest) == SHORTEST_KEY_FORMAT
    assert Redactor().text(shortest) == f"密码:{MARK}"
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


def started(arguments: dict[str, object]) -> ToolStarted:
    return ToolStarted(
        event_id="e",
        task_id="t",
        seq=1,
        # Microseconds: six digits a user's pattern may match.
        occurred_at=datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
        tool_call=ToolCall(id="c", name="run_command", arguments=arguments),
    )


def spellings(secret: str) -> list[str]:
    """The secret as it is, and as JSON writers spell it (escaped, with and without ASCII)."""
    return [secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]]


@pytest.mark.parametrize(
    "password",
    [
        'Tr0ub4dor"&3xyz',
        r"ab\cd\ef123456",
        "长城长城长城长城",  # a Chinese password: JSON writers may spell it \uXXXX
        "tab\tin-the-middle",
        "bell\x07in-the-middle",
        "\u2028line-separator!",
    ],
)
def test_a_credential_that_json_escapes_is_redacted_from_models(password: str) -> None:
    redactor = Redactor(host_secrets({"DB_PASSWORD": password}))
    event = started({"command": f"echo {password}", password: "as a key"})
    stored = redactor.model(event).model_dump_json()
    for spelling in spellings(password):
        assert spelling not in stored, stored
    assert stored.count(MARK) == 2


def test_redacted_models_stay_valid_whatever_a_users_pattern_matches() -> None:
    # \d{6} is in the timestamp's microseconds: the event was rebuilt from redacted JSON
    # data, which no longer parsed as a datetime, and every write of an event failed.
    redactor = Redactor(patterns=[r"\d{6}"])
    event = started({"command": "unlock --pin 123456"})
    cleaned = redactor.model(event)
    assert cleaned.tool_call.arguments == {"command": f"unlock --pin {MARK}"}
    assert cleaned.occurred_at == event.occurred_at
    assert ToolStarted.model_validate_json(cleaned.model_dump_json()) == cleaned


@pytest.mark.parametrize(
    ("redactor", "value"),
    [
        # A user's pattern anchored to the string: in the model's JSON it sits between quotes.
        (Redactor(patterns=[r"^ACME-\d{6}$"]), "ACME-123456"),
        # A bearer token after a newline: in the JSON the newline is a backslash and an n.
        (Redactor(), "Authorization: Bearer\n" + "a1b2c3d4e5" * 3),
    ],
)
def test_models_are_searched_string_by_string_as_text_is(redactor: Redactor, value: str) -> None:
    assert redactor.text(value) != value
    cleaned = redactor.model(started({"value": value}))
    assert cleaned.tool_call.arguments == {"value": redactor.text(value)}


def test_a_models_strings_are_redacted_as_text_redacts_them() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    awkward = ['"', "\\", "\t", "\n", "\x00", "\x7f", "\u2028", "é", "中文", "😀", "sk-"]
    pieces = st.sampled_from(awkward) | st.text(max_size=6)
    texts = st.lists(pieces, max_size=6).map("".join)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(texts.filter(lambda s: len(s) >= 8), min_size=1, max_size=2), st.data())
    def check(secrets: list[str], data: st.DataObject) -> None:
        redactor = Redactor(secrets)
        pieces_with_secrets = st.sampled_from(secrets) | pieces
        value = data.draw(st.lists(pieces_with_secrets, max_size=6).map("".join))
        cleaned = redactor.model(started({"value": value}))
        assert cleaned.tool_call.arguments == {"value": redactor.text(value)}

    check()


def test_the_key_formats_anchors_read_the_same_in_json() -> None:
    # Redactor.model looks for them in a model's JSON before it searches the strings.
    # (pydantic writes non-ASCII characters as they are: 密码 stays 密码.)
    assert all(
        json.dumps(anchor, ensure_ascii=False)[1:-1] == anchor for anchor in KEY_FORMAT_ANCHORS
    )


OPENSSH_BODY = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACA++/3YNUXG8PX/anLl0BYzvDArR9QpTv5IFaluoiFgzwAAAJAaHchPGh3I",
    "TwAAAAtzc2gtZWQ",  # cut in the middle of a line
]


@pytest.mark.parametrize(
    "cut",
    [
        # head -n 4 deploy_key
        "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(OPENSSH_BODY) + "\n",
        # an output cut short, with the tool's note after it
        "-----BEGIN OPENSSH PRIVATE KEY-----\r\n" + "\r\n".join(OPENSSH_BODY) + "(cut)",
        # an encrypted key, its headers first
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        "DEK-Info: AES-128-CBC,34F09A4FC8DE22B6\n\n" + "\n".join(OPENSSH_BODY),
        # on one line, in an assignment
        'KEY="-----BEGIN PRIVATE KEY----- ' + " ".join(OPENSSH_BODY) + '"',
        # in JSON text (the ledger's arguments): the newlines are spelled \n
        json.dumps({"content": "-----BEGIN EC PRIVATE KEY-----\n" + "\n".join(OPENSSH_BODY)}),
    ],
)
def test_a_private_key_cut_before_its_end_line_is_redacted(cut: str) -> None:
    redacted = Redactor().text(f"deploy key: {cut}")
    assert redacted.startswith(f"deploy key: {cut[: cut.index('-----BEGIN')]}{MARK}")
    for line in OPENSSH_BODY:
        assert line not in redacted, redacted


def test_text_after_a_whole_private_key_is_kept() -> None:
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r\n-----END OPENSSH PRIVATE KEY-----"
    assert Redactor().text(f"{key}\nnext step: deploy") == f"{MARK}\nnext step: deploy"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("login with password: hunter22 now", f"login with password: {MARK} now"),
        ("PASSWORD='s3cr3t!x'", f"PASSWORD='{MARK}'"),
        ("数据库密码：Abc12345，请妥善保管", f"数据库密码：{MARK}，请妥善保管"),
        ("口令=zz99yy88", f"口令={MARK}"),
        ("DB_PASSWORD=supersecret1\nDEBUG=1", f"DB_PASSWORD={MARK}\nDEBUG=1"),
        ('export API_KEY="sk-secret-123456"', f'export API_KEY="{MARK}"'),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            f"aws_secret_access_key = {MARK}",
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: Basic {MARK}"),
        (
            "git clone https://bob:s3cr3t@example.com/r.git",
            f"git clone https://bob:{MARK}@example.com/r.git",
        ),
    ],
)
def test_a_value_its_label_calls_secret_is_redacted_and_the_label_kept(
    text: str, kept: str
) -> None:
    assert Redactor().text(text) == kept


@pytest.mark.parametrize(
    "text",
    [
        "DEBUG_KEY=true",  # too short to be a credential
        "https://example.com:8080/a@b",  # a port, not a password
        '["password=",123456789]',  # JSON searched whole is never cut across its structure
        "the basic idea of authorization",
        '{"page_token": "CURSOR-123456", "max_tokens": 5000}',  # a cursor, a count
        "token: 5 tokens",
    ],
)
def test_labels_without_a_secret_after_them_leave_the_text_alone(text: str) -> None:
    assert Redactor().text(text) == text


def test_the_way_to_a_keys_end_line_never_passes_another_begin_line() -> None:
    # What keeps a text of many BEGIN lines without END from being searched to its end from
    # each of them (quadratic: 100 kB took 3 s on the event loop): each key's match stops
    # at the next BEGIN line, so the two keys here are two matches, not one.
    begin, end = "-----BEGIN RSA PRIVATE KEY-----\n", "-----END RSA PRIVATE KEY-----"
    text = f"{begin}MIIEcut\n{begin}MIIEwhole\n{end}"
    assert Redactor().text(text) == f"{MARK}{MARK}"
    many = Redactor().text(f"{begin}abc\n" * 20_000)
    assert many == MARK * 20_000


def test_values_named_secret_by_their_key_are_redacted_and_counts_are_not() -> None:
    redactor = Redactor()
    data = {
        "db_password": "hunter2",
        "clientSecret": "abc",
        "X-Api-Key": "k1",
        "用户密码": "口令八位",
        "max_tokens": "512",
        "tokens": "5",
        "pwd": "/home/me",
        "note": "plain",
        "nested": [{"refresh_token": "r1", "count": 3}],
    }
    assert redactor.data(data) == {
        **data,
        "db_password": MARK,
        "clientSecret": MARK,
        "X-Api-Key": MARK,
        "用户密码": MARK,
        "nested": [{"refresh_token": MARK, "count": 3}],
    }
    call = ToolCall(id="c", name="login", arguments={"user": "me", "password": "hunter2"})
    assert redactor.model(call).arguments == {"user": "me", "password": MARK}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"note": "密码：MIMA-9f8e7d6c"}),  # \uXXXX escapes hide the label
        json.dumps({"note": 'login password: "MIMA-9f8e7d6c"'}),  # \" before the value
        json.dumps([{"password": "MIMA-9f8e7d6c"}], indent=2),
        '{"token": "\\"MIMA-9f8e7d6c"}',
    ],
)
def test_a_json_text_is_searched_as_the_strings_it_encodes(text: str) -> None:
    redactor = Redactor()
    assert redactor.contains_secret(text)
    cleaned = redactor.text(text)
    assert "MIMA-9f8e7d6c" not in cleaned and MARK in cleaned
    json.loads(cleaned)  # still JSON
    raw = ToolCall(id="c", name="f", arguments={}, raw_arguments=text)
    assert "MIMA-9f8e7d6c" not in (redactor.model(raw).raw_arguments or "")
    # Nothing to redact: the very same text, not one written again.
    plain = json.dumps({"note": "长城", "max_tokens": 5})
    assert redactor.text(plain) is plain


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # A number under a secret's name: the mark as a string, the JSON still JSON.
        ('{"password": 12345678, "n": 1}', '{"password": "[REDACTED]", "n": 1}'),
        ("{'password': 'hunter22', 'n': 1}", "{'password': '[REDACTED]', 'n': 1}"),
        ('{"SECRET_KEY": "django-insecure-x1"}', '{"SECRET_KEY": "[REDACTED]"}'),
        # (JSON in which something is redacted is written again, as json.dumps writes it.)
        ('{"token":\n  "abc123xyz"}', '{"token": "[REDACTED]"}'),
        ("api_key: sk_abcdefghij1234", "api_key: [REDACTED]"),
        ('secret_key = "Zx9-abcdef"', 'secret_key = "[REDACTED]"'),
        ("client_secret: abcd1234efgh", "client_secret: [REDACTED]"),
        # A list or an object under such a name, in JSON a tool wrapped in a note.
        (
            'result: {"credentials": {"user": "bob", "pass": "x1"}} end',
            'result: {"credentials": "[REDACTED]"} end',
        ),
        (
            '<untrusted-data>\n{"\\u5bc6\\u7801": "MIMA-1234"}\n</untrusted-data>',
            '<untrusted-data>\n{"密码": "[REDACTED]"}\n</untrusted-data>',
        ),
    ],
)
def test_config_and_json_spellings_of_a_secret_are_redacted(text: str, kept: str) -> None:
    assert Redactor().text(text) == kept
