"""A tool result cut for the model never keeps part of a secret the stores would redact.

The cut text is also what the stores keep (the conversation, the event, the span), redacted
on the way in: a key or a password cut through keeps a head that no pattern recognises any
more. With the redactor's view of where secrets are, each cut falls outside them.
"""

from __future__ import annotations

import pytest

from core_agent.contracts.text_cuts import SPAN_WINDOW, head_of, truncate_observation
from core_agent.memory.session_history import shorten
from core_agent.safety.redaction import MARK, Redactor

HOST_KEY = "hk-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
"""A host credential (an environment variable's value), a literal secret of the redactor."""

SECRETS = [
    HOST_KEY,
    "sk-proj-" + "A1b2C3d4E5f6G7h8" * 3,  # an OpenAI key, by its format
    "ghp_" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",  # a GitHub token
    "password=hunter2hunter2",  # a labelled value
    '"api_key": "Q29yZUFnZW50U2VjcmV0VmFsdWU"',  # a JSON member named like a secret
    "密码：天王盖地虎宝塔镇河妖",  # a Chinese label
]
LIMIT = 1000


def leaks(text: str, secret: str, redactor: Redactor) -> list[str]:
    """The pieces of ``secret`` (6 characters or more) still in ``text`` once redacted."""
    stored = redactor.text(text)
    value = secret.split("=", 1)[-1].split("：", 1)[-1].split(": ", 1)[-1].strip('"')
    return [value[i : i + 6] for i in range(len(value) - 5) if value[i : i + 6] in stored]


def cut_points(length: int) -> tuple[int, int]:
    """Where a plain cut of a text of ``length`` ends its head and starts its tail."""
    cut = truncate_observation("x" * length, LIMIT)
    head = cut.index("\n")
    tail = len(cut) - (cut.index("]\n") + 2)
    return head, length - tail


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("edge", ["head", "tail"])
def test_no_cut_keeps_part_of_a_secret(secret: str, edge: str) -> None:
    redactor = Redactor([HOST_KEY])
    length = 6000
    head, tail = cut_points(length)
    at = head if edge == "head" else tail
    # The secret placed across the cut, from just after it to just before it.
    for shift in range(-len(secret) - 1, 2):
        start = at + shift
        text = ("word " * length)[:start] + secret
        text += ("word " * length)[: length - len(text)]
        cut = truncate_observation(text, LIMIT, redactor.secret_spans)
        assert len(cut) <= LIMIT
        assert leaks(cut, secret, redactor) == [], (shift, cut)


def test_without_the_redactors_view_a_cut_can_split_a_secret() -> None:
    """What the secret-aware cut is for: the plain cut keeps a head no pattern matches."""
    redactor = Redactor([HOST_KEY])
    keep = truncate_observation("x" * 7000, LIMIT).index("\n")
    text = "w" * (keep - 10) + " " + HOST_KEY + " " + "w" * 6000
    assert leaks(truncate_observation(text, LIMIT), HOST_KEY, redactor)
    cut = truncate_observation(text, LIMIT, redactor.secret_spans)
    assert leaks(cut, HOST_KEY, redactor) == []
    assert cut.startswith("w" * (keep - 10) + " ")  # the head keeps what precedes it


def test_a_secret_kept_whole_is_redacted_whole() -> None:
    redactor = Redactor([HOST_KEY])
    text = "start " + HOST_KEY + " " + "w" * 5000
    cut = truncate_observation(text, LIMIT, redactor.secret_spans)
    assert redactor.text(cut).startswith(f"start {MARK} ")


def test_overlapping_secrets_move_the_cut_past_all_of_them() -> None:
    spans = [(90, 120), (100, 140), (135, 200)]
    text = "a" * 89 + "\n" + "a" * 910  # the secrets' line starts at 90
    cut = truncate_observation(text, 300, lambda _: spans)
    head = cut.index("\n[...")
    assert head <= 90 or head >= 200
    assert head == 90


def test_only_the_text_around_each_cut_is_searched() -> None:
    """A tool result of megabytes costs what a short one does: the redactor's patterns run
    over a window around each cut point, on the event loop, not over the whole text."""
    searched: list[int] = []

    def spans(text: str) -> list[tuple[int, int]]:
        searched.append(len(text))
        return Redactor([HOST_KEY]).secret_spans(text)

    keep = cut_points(8_000_000)[0]
    text = "w" * (keep - 10) + HOST_KEY + "w" * 8_000_000
    cut = truncate_observation(text, LIMIT, spans)
    assert leaks(cut, HOST_KEY, Redactor([HOST_KEY])) == []
    assert searched and max(searched) <= 2 * SPAN_WINDOW


def test_the_session_history_cuts_outside_secrets_too() -> None:
    redactor = Redactor([HOST_KEY])
    keep = shorten("x" * 7000, LIMIT).index("\n")
    text = "w" * (keep - 10) + " " + HOST_KEY + " " + "w" * 6000
    assert leaks(shorten(text, LIMIT), HOST_KEY, redactor)  # what it is for
    assert leaks(shorten(text, LIMIT, redactor.secret_spans), HOST_KEY, redactor) == []


@pytest.mark.parametrize("edge", ["head", "tail"])
def test_a_secret_spelled_in_json_escapes_is_not_cut_through(edge: str) -> None:
    """A JSON text may spell a key ``\\u0073k-...`` or a path-like secret with ``\\/``: the
    stores decode it and would redact the whole, but not a piece of it."""
    redactor = Redactor(["hk/9f8e7d6c5b4a39281706f5e4d3c2b1a0"])
    for secret, spelled in (
        ("sk-proj-" + "Ab12Cd34" * 5, "\\u0073k-proj-" + "Ab12Cd34" * 5),
        ("hk/9f8e7d6c5b4a39281706f5e4d3c2b1a0", "hk\\/9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ):
        length = 6000
        head, tail = cut_points(length)
        at = head if edge == "head" else tail
        for shift in range(-len(spelled) - 1, 2):
            text = ('"' + "w" * length)[: at + shift] + spelled
            text += ("w" * length)[: length - len(text)]
            cut = truncate_observation(text, LIMIT, redactor.secret_spans)
            stored = redactor.text(cut)
            assert secret[4:14] not in stored.replace("\\/", "/"), (shift, cut)
            assert secret[4:14] not in stored.encode().decode("unicode_escape"), (shift, cut)


def test_a_users_pattern_keeps_the_context_it_needs_at_a_cut() -> None:
    """``(?<=PIN: )QZ\\d{6}``: the secret is the digits; a tail starting between ``PIN: `` and
    them would keep them without what makes them one."""
    redactor = Redactor(patterns=[r"(?<=PIN: )QZ\d{6}"])
    length = 6000
    _, tail = cut_points(length)
    for shift in range(-12, 4):
        start = tail + shift
        text = ("filler\n" * length)[:start] + "PIN: QZ123456\n"
        text += ("filler\n" * length)[: length - len(text)]
        cut = truncate_observation(text, LIMIT, redactor.secret_spans)
        assert "QZ123456" not in redactor.text(cut), (shift, cut[-60:])


def test_secrets_close_together_cost_a_cut_one_secret_at_most() -> None:
    """A long line (minified JSON) with a key every 150 characters: the head gives up the one
    key it would split, not the whole run of them."""
    redactor = Redactor([HOST_KEY])
    text = ("w" * 110 + HOST_KEY) * 200
    head, _ = cut_points(len(text))
    cut = truncate_observation(text, LIMIT, redactor.secret_spans)
    assert cut.index("\n[...") >= head - len(HOST_KEY)


def test_a_users_look_ahead_pattern_keeps_what_follows_the_secret_at_a_cut() -> None:
    """``\\d{6}(?= is your PIN)``: a head ending between the digits and what makes them a PIN
    would keep them without it."""
    redactor = Redactor(patterns=[r"\d{6}(?= is your PIN)"])
    for limit in range(100, 125):
        head = head_of("A" * 100 + "123456 is your PIN. " + "B" * 500, limit, redactor.secret_spans)
        assert "123456" not in redactor.text(head), (limit, head[-30:])
