"""Secrets never reach the stores: what is redacted, and how.

A ``Redactor`` replaces, in any text, the values of the model and embedding keys, the values
of the host's credential variables (names with KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL...),
well-known key formats (OpenAI, Anthropic, GitHub, AWS, Google, Slack, Stripe keys, JWTs,
bearer tokens, private key blocks), values a label names as secret (``password: …``,
``密码：…``, ``DB_PASSWORD=…``, ``Authorization: Basic …``, a URL's password, a JSON member
or a dictionary entry named like one, ``"db_password": …``; the label stays) and the
patterns the user configures (``AGENT_REDACT_PATTERNS``), with ``[REDACTED]``. A JSON text
that escapes characters (a Chinese label spelled in ``u`` escapes, a quote before a value) is
searched as the strings it encodes. The store wrappers in ``redacting_stores`` apply it to
every event, span, checkpoint and memory before it is written; what the model and the host
see in memory is unchanged.
"""

from __future__ import annotations

import functools
import json
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import to_json

from core_agent.contracts.errors import ConfigurationError, RedactedArgumentsError
from core_agent.contracts.trace_store import cut_text

M = TypeVar("M", bound=BaseModel)

MARK = "[REDACTED]"
MIN_SECRET_CHARS = 8
"""Shorter values of credential variables are not treated as secrets (too many false hits)."""
_VALUE = r"[^\s\"'\\,:;\]}}，。；、（）][^\s\"'\\，。；、（）]{{{least},}}"
"""A labelled secret's value, of at least ``least`` + 1 characters (a ``str.format`` template)."""

SECRET_NAMES = (
    "password",
    "pass_word",
    "pass-word",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "secret_key",
    "secret-key",
    "secretkey",
    "api_key",
    "api-key",
    "api.key",
    "apikey",
    "access_key",
    "access-key",
    "accesskey",
    "private_key",
    "private-key",
    "privatekey",
    "access_token",
    "access-token",
    "accesstoken",
    "refresh_token",
    "refresh-token",
    "refreshtoken",
    "auth_token",
    "auth-token",
    "authtoken",
    "id_token",
    "bearer_token",
    "session_token",
    "api_token",
    "credential",
    "credentials",
    "authorization",
)
"""What the name of a JSON member or a dictionary's key ends with (in any case) when its value
is a secret (``"db_password"``, ``"clientSecret"``, ``"X-Api-Key"``, ``"SECRET_KEY"``), with
``密码``, ``口令`` and ``密钥``. A name that is ``EXACT_SECRET_NAMES`` alone is one too. Not a
name merely ending in ``token`` (``page_token``, ``next_page_token`` are cursors a model pages
with), ``tokens`` (counts) or ``pwd`` (a working directory)."""
EXACT_SECRET_NAMES = ("token", "pass")
"""Names that say a value is a secret only alone (``"token"``; ``"page_token"`` is none)."""
_SECRET_NAME = (
    "(?:(?ai:"
    + "|".join(re.escape(name) for name in sorted(SECRET_NAMES, key=len, reverse=True))
    + ")|密码|口令|密钥)"
)
_EXACT_SECRET_NAME = "(?ai:" + "|".join(map(re.escape, EXACT_SECRET_NAMES)) + ")"
_SECRET_KEY = re.compile(r"[^\"\\\n]{0,64}?" + _SECRET_NAME + "|" + _EXACT_SECRET_NAME)
"""A dictionary key whose value is redacted whole (matched in full)."""
_LABEL_NAMES = (
    "password",
    "passwd",
    "passphrase",
    "aws_secret_access_key",
    "secret",
    "secret_key",
    "api_key",
    "apikey",
    "access_token",
    "refresh_token",
    "auth_token",
    "private_key",
    "credentials",
)
"""Labels of a value in plain text (``password: …``, YAML's ``api_key: …``, TOML's
``secret_key = "…"``), in any case; ``client_secret`` ends with one. ``token`` alone is not
(``token: 5`` in prose). A quoted name is a member's (``MEMBER_FORMAT``)."""

KEY_FORMATS = (
    r"sk-ant-[A-Za-z0-9_\-]{20,}",
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"github_pat_[A-Za-z0-9_]{40,}",
    r"glpat-[A-Za-z0-9_\-]{20,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"AIza[0-9A-Za-z_\-]{35}",
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",
    r"hf_[A-Za-z0-9]{30,}",
    r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{20,}",
    # To its END line or, cut before it (``head -n 3 key``, an output cut short), to the end
    # of its body: encryption headers, base64 and the space between lines, spelled ``\n`` too
    # (a key in JSON text). The way to the END line never passes five dashes in a row (the
    # next BEGIN line): a text of many BEGIN lines without END was searched to its end from
    # each of them (100 kB: 3 s).
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:(?:[^-]|-{1,4}[^-])*?-----END [A-Z ]*PRIVATE KEY-----|"
    r"(?:(?:Proc-Type|DEK-Info):[ \t\w,-]*|[A-Za-z0-9+/=\s]|\\[rn])*)",
    # A value after a label that says it is one; the label is kept (``KEPT_GROUPS``). The
    # value stops at a quote, a backslash or a space, and cannot start at JSON's punctuation,
    # so a JSON text searched whole is never cut across its structure.
    r"(?P<kept_label>(?:(?ai:"
    + "|".join(sorted(_LABEL_NAMES, key=len, reverse=True))
    + r")|密码|口令|密钥)[ \t]*[:=：][ \t]*[\"']?)"
    + _VALUE.format(least=3),
    # The name is at most 64 characters: unbounded, a long run of capitals and digits
    # (a hex dump) was searched to its end from each of its characters.
    r"(?P<kept_variable>[A-Z][A-Z0-9_]{0,63}_(?:KEY|TOKEN|SECRET|PASSWORD|PASS|PWD|CREDENTIALS?)"
    r"[ \t]*=[ \t]*[\"']?)" + _VALUE.format(least=7),
    r"(?P<kept_basic>(?i:authorization)[ \t]*[:=][ \t]*[\"']?(?i:basic)[ \t]+)"
    r"[A-Za-z0-9+/=]{8,}",
    # The password of a URL's user (``https://user:pw@host``), the ``@`` kept.
    # (A scheme is at most 32 characters, for the same reason.)
    r"(?P<kept_url>[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s/:@\"'\\]+:)[^\s/@\"'\\]+(?P<kept_at>@)",
)
"""Credential formats redacted wherever they appear."""
_MEMBER_NAME = r'"(?:[^"\\\n]{0,64}?' + _SECRET_NAME + "|" + _EXACT_SECRET_NAME + r')"[ \t]*:\s*'
_QUOTED_MEMBER_NAME = (
    r"'(?:[^'\\\n]{0,64}?" + _SECRET_NAME + "|" + _EXACT_SECRET_NAME + r")'[ \t]*:\s*"
)
MEMBER_FORMAT = (
    f'(?P<kept_member>{_MEMBER_NAME}")' + r'(?:[^"\\\n]|\\.)+'
    f"|(?P<kept_number>{_MEMBER_NAME})" + r"-?[0-9][0-9.eE+\-]{3,}"
    # A Python dictionary as printed: ``{'password': '…'}``.
    f"|(?P<kept_quoted>{_QUOTED_MEMBER_NAME}')" + r"(?:[^'\\\n]|\\.)+"
)
"""A JSON member named like a secret (``"db_password": "…"``): its string, escapes and all,
up to its closing quote, or its number of four digits or more (written as the marked string);
the name kept. A list or an object under such a name is redacted whole where the JSON is read
as data (``Redactor.data``), or, cut short, where it stands (``_secret_containers_marked``).
Searched after ``KEY_FORMATS`` and the literal secrets, once
they are replaced: found first, it would take the head of a literal secret holding a quote
(``"password": "pa"ss-w0rd"``) and leave its tail."""
KEPT_GROUPS = (
    "kept_label",
    "kept_variable",
    "kept_basic",
    "kept_url",
    "kept_member",
    "kept_number",
    "kept_quoted",
)
"""Groups of ``KEY_FORMATS`` and ``MEMBER_FORMAT`` kept before the mark (a label, a URL's user)."""
KEY_FORMAT_ANCHORS = (
    "sk-",
    "_live_",
    "_test_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "AKIA",
    "ASIA",
    "AIza",
    "xox",
    "hf_",
    "eyJ",
    "-----BEGIN",
)
"""Every match of a case-sensitive, unlabelled ``KEY_FORMATS`` pattern holds one of these.
Finding none with ``in`` is about thirty times faster than the patterns' search, which is
then skipped: events, spans and checkpoints of every step are redacted, and almost none
holds a key. Stripe-style keys (``sk_live_...``) are found by
their middle: ``sk_`` alone is in ``task_id`` and ``risk_level``, which every event's JSON
holds, and the search ran over all of them. The formats that match in any case are found by
``CASELESS_ANCHORS`` instead."""
CASELESS_ANCHORS = (
    "bearer",
    "passw",
    "passphrase",
    "aws_secret",
    "authorization",
    "secret",
    "api_key",
    "apikey",
    "access_token",
    "refresh_token",
    "auth_token",
    "private_key",
    "credential",
)
"""Every match of a case-insensitive ``KEY_FORMATS`` pattern holds one of these, looked for in
the text in lower case. Not ``_token`` alone: every usage record holds ``input_tokens``, and
the models holding one were all walked string by string (the step took 13 % longer)."""
VARIABLE_ANCHORS = ("_KEY", "_TOKEN", "_SECRET", "_PASS", "_PWD", "_CREDENTIAL")
"""Every ``NAME_KEY=value`` match holds ``=`` and one of these (looked for after the ``=``)."""
CHINESE_ANCHORS = ("密码", "口令", "密钥")
"""Every match of a Chinese label holds one of these (looked for in non-ASCII texts only)."""
_MEMBER_ENDINGS = ("token", "key", "word", "pass")
"""How every member anchor (``MEMBER_ANCHORS``) ends before its closing quote."""


def _member_anchors() -> dict[str, tuple[str, ...]]:
    ends = [
        f"{name}{quote}"
        for name in SECRET_NAMES
        if not any(anchor in name for anchor in CASELESS_ANCHORS)
        for quote in ('"', '\\"')
    ]
    ends += [f"{quote}{name}{quote}" for name in EXACT_SECRET_NAMES for quote in ('"', '\\"')]
    by_ending = {
        ending: tuple(end for end in ends if end.rstrip('"\\').endswith(ending))
        for ending in _MEMBER_ENDINGS
    }
    unsorted = set(ends) - {end for group in by_ending.values() for end in group}
    if unsorted:  # its member would slip past the quick check
        raise RuntimeError(f"secret names without a member ending: {sorted(unsorted)}")
    return by_ending


MEMBER_ANCHORS = _member_anchors()
"""By how the name ends: what every JSON member with a ``SECRET_NAMES`` (or
``EXACT_SECRET_NAMES``) name holds in lower case (the name's end and its closing quote,
escaped too: a JSON text inside a string), unless a ``CASELESS_ANCHORS`` anchor finds it.
Looked for only when the ending and a quote are in the text: ``token`` alone is in every
usage record (``input_tokens``), and a check of every anchor cost a model's quick check 9 us."""
_MEMBER_CHECKS = tuple(
    (f'{ending}"', f'{ending}\\"', anchors) for ending, anchors in MEMBER_ANCHORS.items()
)
"""Each member ending with its closing quote (plain and escaped), and its anchors."""
SHORTEST_KEY_FORMAT = 7
"""No text shorter than this matches one of ``KEY_FORMATS`` (``密码:`` and four characters)."""

_CREDENTIAL_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|PRIVATE|SESSION|PAT)",
    re.IGNORECASE,
)
_NOT_A_SECRET = re.compile(r"(_SOCK|_PATH|_FILE|_DIR|_URL|_HOST|_PORT|_ID|_REGION)$", re.I)


def host_secrets(environ: Mapping[str, str]) -> list[str]:
    """Values of the environment's credential variables (``OPENAI_API_KEY``, ``GH_TOKEN``...)."""
    found = []
    for name, value in environ.items():
        if not _CREDENTIAL_NAME.search(name) or _NOT_A_SECRET.search(name):
            continue
        value = value.strip()
        if len(value) >= MIN_SECRET_CHARS and not value.startswith("/") and " " not in value:
            found.append(value)
    return found


def refuse_redacted_call(tool_name: str, arguments: Mapping[str, Any]) -> None:
    """Refuse a call read back from the stores that holds the mark where a secret was.

    The rule for every call carried on from what was stored. The stores keep a call's
    arguments redacted, so such a call (the rest of a resumed or forked turn, a recorded
    model answer run against live tools) holds ``[REDACTED]`` where the model had written a
    secret: run, the tool would log in, write or send with the placeholder as if it were
    the value. A call that holds the mark is refused instead, saying where. (A model that
    wrote the mark itself cannot be told from a redaction: refused too, the safe side.)

    Raises:
        RedactedArgumentsError: ``arguments`` hold the mark, in a value or a key.
    """
    places = tuple(_marked_places(arguments, ""))
    if places:
        raise RedactedArgumentsError(
            f"{tool_name} was not run: its arguments were read back from storage, where a "
            f"secret in them was replaced by {MARK} ({', '.join(places)}), and it would have "
            f"received the placeholder instead of the value. Call {tool_name} again with the "
            "real value if you have it, or go on without it",
            tool_name=tool_name,
            places=places,
        )


def _marked_places(value: Any, place: str) -> Iterable[str]:
    """Where JSON-like ``value`` holds the mark, as ``name``, ``name.key`` or ``name[2]``."""
    if isinstance(value, str):
        if MARK in value:
            yield place or "(arguments)"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            inner = f"{place}.{key}" if place else str(key)
            if isinstance(key, str) and MARK in key:
                yield inner
            else:
                yield from _marked_places(item, inner)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _marked_places(item, f"{place or '(arguments)'}[{index}]")


class Redactor:
    """Replaces secrets (literal values and patterns) in text, data and protocol models."""

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        literals = sorted(
            {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
        )
        parts = [re.escape(secret) for secret in literals]
        patterns = tuple(patterns)
        for pattern in (*KEY_FORMATS, *patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigurationError(
                    f"AGENT_REDACT_PATTERNS: {pattern!r} is not a regular expression: {exc}"
                ) from exc
            parts.append(f"(?:{pattern})")
        self._user_patterns = patterns
        self._regex = re.compile("|".join(parts)) if parts else None
        self._members = re.compile(MEMBER_FORMAT)
        # Without user patterns, a text with none of these holds no secret (KEY_FORMAT_ANCHORS).
        self._anchors = None if patterns else (*KEY_FORMAT_ANCHORS, *literals)
        # The same, as a model's JSON spells them: ``model`` looks for them in that text.
        self._json_anchors = (
            None
            if patterns
            else (*KEY_FORMAT_ANCHORS, *(to_json(secret).decode()[1:-1] for secret in literals))
        )
        # A text shorter than anything the pattern matches holds no secret: most texts
        # redacted are names and ids, so they are let through without running it. The
        # user's patterns may match anything, however short.
        self._shortest = 0 if patterns else min([*map(len, literals), SHORTEST_KEY_FORMAT])

    @property
    def searches_json_whole(self) -> bool:
        """Whether a search of a JSON text finds whatever a search of its strings would.

        True without user patterns: literal secrets and the built-in key formats match
        wherever a string sits, never by what surrounds it (no anchors, word boundaries or
        look-arounds; a test holds them to it). A user's pattern may depend on the edges of
        the string it is given. Lets a caller search a span's attributes as one text
        (``RedactingTraceStore``), as long as each string is in the text as it is.
        """
        return self._user_patterns == ()

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by ``[REDACTED]``.

        A JSON text that escapes characters is searched as the strings it encodes (a secret
        spelled in escapes, or after an escaped quote, is found), and written again if one
        was replaced.
        """
        regex = self._regex
        if regex is None:
            return value
        return self._cleaned_string(value, regex)

    def contains_secret(self, value: str) -> bool:
        """Whether ``value`` holds something ``text`` would replace."""
        regex = self._regex
        if regex is None:
            return False
        if _may_hold_json(value) and (
            self._decoded_json(value, regex) is not None
            or _secret_containers_marked(value) is not None
        ):
            return True
        return self._may_hold_secret(value) and (
            regex.search(value) is not None or self._members.search(value) is not None
        )

    def secret_spans(self, value: str) -> list[tuple[int, int]]:
        r"""Where ``value``, as it is, holds what ``text`` replaces: ``(start, end)``, in order.

        For a cut (an observation too long for the model): a secret cut through keeps a part
        that redaction no longer recognises (the head of a key, a label with half its value),
        so a cut moves out of these. Found as the patterns and secret-named members match
        the text, and the text with JSON's escapes undone (a secret spelled ``\u0073k-...``
        or with ``\/``), each place mapped back to where it is spelled. With the user's own
        patterns, each place runs over its whole line (``USER_PATTERN_CONTEXT_CHARS`` either
        side at most): such a pattern may need what surrounds the secret (``(?<=PIN: )...``,
        ``...(?= is your PIN)``), which a text cut between the two would keep without.
        """
        regex = self._regex
        if regex is None:
            return []
        spans = self._spans_in(value, regex)
        unescaped, places = _unescaped_with_places(value)
        if places is not None:
            spans.extend((places[a], places[b]) for a, b in self._spans_in(unescaped, regex))
        if self._user_patterns:
            spans = [(_line_start(value, start), _line_end(value, end)) for start, end in spans]
        return sorted(set(spans))

    def _spans_in(self, text: str, regex: re.Pattern[str]) -> list[tuple[int, int]]:
        spans = [(a, end) for a, _, end in _secret_containers(text)] if _may_hold_json(text) else []
        if not self._may_hold_secret(text):
            return spans
        spans.extend(match.span() for match in regex.finditer(text))
        spans.extend(match.span() for match in self._members.finditer(text))
        return spans

    def names_secret_member(self, text: str) -> bool:
        """Whether ``text`` (a JSON text) may hold a member or key named like a secret.

        By its name alone, whatever its value: a member whose value starts with an escaped
        quote is one the member format cannot take from the JSON text, but a walk of the
        data redacts it by its key (``data``).
        """
        if len(text) < self._shortest or ":" not in text:
            return False
        return _names_a_secret(text)

    def _cleaned_string(self, value: str, regex: re.Pattern[str]) -> str:
        """``text``: ``value`` redacted, the same object when nothing was."""
        if _may_hold_json(value):
            decoded = self._decoded_json(value, regex)
            if decoded is not None:
                value = decoded
            # What no decode reached: JSON cut short (an observation's head), whose lists and
            # objects under secret names the member format cannot take.
            marked = _secret_containers_marked(value)
            if marked is not None:
                value = marked
        if not self._may_hold_secret(value):
            return value
        return self._substituted(value, regex) or value

    def _substituted(self, value: str, regex: re.Pattern[str]) -> str | None:
        """``value`` with the patterns' matches marked, then the members'; ``None`` if none."""
        cleaned, count = regex.subn(_marked, value)
        cleaned, members = self._members.subn(_marked, cleaned)
        return cleaned if count or members else None

    def _decoded_json(self, value: str, regex: re.Pattern[str]) -> str | None:
        """``value`` with the JSON it holds redacted as data (``_clean_value``).

        Each JSON object or array in the text (a tool result may wrap one in a note: the
        untrusted-data fence) is decoded and, if anything in it was redacted, written again
        in its place. JSON that does not decode (cut short, a trailing comma) is searched with
        its escapes undone instead. ``None`` when nothing was redacted.
        """
        decoder = json.JSONDecoder()
        pieces: list[str] = []
        done = tries = 0
        changed = False
        for opener in _JSON_OPENER.finditer(value):
            start = opener.start()
            if start < done:
                continue
            tries += 1
            if tries > _JSON_TRIES:
                break
            try:
                data, end = decoder.raw_decode(value, start)
            except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
                continue
            cleaned = self._clean_value(data, regex)
            if cleaned is not data:
                pieces += (value[done:start], json.dumps(cleaned, ensure_ascii=False))
                changed = True
            else:
                pieces.append(value[done:end])
            done = end
        if changed:
            return "".join(pieces) + value[done:]
        unescaped = _unescaped(value)
        if unescaped == value or not self._may_hold_secret(unescaped):
            return None
        return self._substituted(unescaped, regex)

    def _may_hold_secret(self, value: str) -> bool:
        """``False`` when ``value`` cannot hold a secret, without running the patterns."""
        if len(value) < self._shortest or not value:
            return False
        anchors = self._anchors
        if anchors is None:
            return True
        for anchor in anchors:
            if anchor in value:
                return True
        return _holds_other_anchor(value)

    def data(self, value: Any, *, max_chars: int | None = None, keys: bool = True) -> Any:
        """JSON-like data with every string (keys included) redacted.

        With ``max_chars``, each string value is then cut to that length (``cut_text``): a
        cut made after the redaction never leaves part of a secret behind. Without ``keys``,
        the keys of the dictionaries are left as they are (names the caller chose).
        """
        if isinstance(value, str):
            return self._string(value, max_chars)
        if isinstance(value, dict | list | tuple):
            return self._walk(value, max_chars, keys)
        return value

    def _string(self, value: str, max_chars: int | None) -> str:
        if self._regex is not None:
            value = self._cleaned_string(value, self._regex)
        if max_chars is None or len(value) <= max_chars:
            return value
        return cut_text(value, max_chars)

    def _walk(self, value: Any, max_chars: int | None, keys: bool) -> Any:
        # Strings and numbers are handled here rather than by a call each: spans go through
        # this at every step of every task, and most of what they hold is short strings.
        string, walk = self._string, self._walk
        if isinstance(value, dict):
            cleaned = {}
            for key, item in value.items():
                if _names_secret(key, item):
                    item = MARK
                if keys and isinstance(key, str):
                    key = string(key, None)
                if isinstance(item, str):
                    item = string(item, max_chars)
                elif isinstance(item, dict | list | tuple):
                    item = walk(item, max_chars, keys)
                cleaned[key] = item
            return cleaned
        return [
            string(item, max_chars)
            if isinstance(item, str)
            else walk(item, max_chars, keys)
            if isinstance(item, dict | list | tuple)
            else item
            for item in value
        ]

    def model(self, model: M) -> M:
        r"""A protocol model with its strings redacted (the same object when nothing is).

        Each string the model holds (in its fields, nested models, lists and dictionaries,
        keys included) is searched as it is, as ``text`` searches it, never in the model's
        JSON, where a quote, a backslash or a control character is spelled otherwise. Values of
        other types (dates, numbers, enumerations) and ``Literal`` fields (a kind, a phase) are
        left as they are, so the copy stays valid for its model whatever a user's pattern
        matches (``\d{6}`` matches every timestamp's microseconds).
        """
        regex = self._regex
        if regex is None:
            return model
        json_anchors = self._json_anchors
        # Almost no model holds a secret: one search of its JSON for what every secret
        # contains lets it through without a walk of its strings.
        if json_anchors is not None and not self._json_may_hold_secret(
            model.model_dump_json(), json_anchors
        ):
            return model
        return self._clean_model(model, regex)

    def _json_may_hold_secret(self, text: str, anchors: tuple[str, ...]) -> bool:
        r"""``False`` when no string of a model's JSON ``text`` can hold a secret.

        ``anchors`` holds each literal secret as the model's serializer spells it (a quote
        escaped, a control character as ``\uXXXX``), so the test holds however a string
        holding it was escaped; the key formats' anchors have no character JSON escapes. A
        string that holds a backslash (``\\`` in the model's JSON) may be a JSON text whose
        escapes hide a secret: it is decoded (``_cleaned_string``).
        """
        if len(text) < self._shortest:
            return False
        for anchor in anchors:
            if anchor in text:
                return True
        return "\\\\" in text or _holds_other_anchor(text)

    def _clean_model(self, model: M, regex: re.Pattern[str]) -> M:
        fixed = _literal_fields(type(model))
        updates = {}
        for name, value in model:
            if name not in fixed:
                cleaned = self._clean_value(value, regex)
                if cleaned is not value:
                    updates[name] = cleaned
        # Copied rather than validated again: only strings were replaced, by strings.
        return model.model_copy(update=updates) if updates else model

    def _clean_value(self, value: Any, regex: re.Pattern[str]) -> Any:
        """``value`` with its strings redacted; the same object when nothing was."""
        if type(value) is str:  # an enumeration's member is a str too, and is left alone
            return self._cleaned_string(value, regex)
        if isinstance(value, BaseModel):
            return self._clean_model(value, regex)
        kind = type(value)
        if kind is dict:
            items = {}
            changed = False
            for key, item in value.items():
                new_key = self._clean_value(key, regex)
                new_item = MARK if _names_secret(key, item) else self._clean_value(item, regex)
                changed = changed or new_key is not key or new_item is not item
                items[new_key] = new_item
            return items if changed else value
        if kind is list or kind is tuple or kind is set or kind is frozenset:
            cleaned_items = [self._clean_value(item, regex) for item in value]
            if all(new is old for new, old in zip(cleaned_items, value, strict=True)):
                return value
            return kind(cleaned_items)
        return value


def _holds_other_anchor(text: str) -> bool:
    """Whether ``text`` holds what a labelled ``KEY_FORMATS`` match needs (cheapest first)."""
    equals = "=" in text
    if not equals and ":" not in text and "：" not in text:
        # Every label is followed by one of these; only the bearer format needs none.
        return "bearer" in text.lower()
    if equals and any(anchor in text for anchor in VARIABLE_ANCHORS):
        return True
    if "://" in text and "@" in text:
        return True
    return _names_a_secret(text)


def _names_a_secret(text: str) -> bool:
    """Whether ``text`` holds a label or a member name that says a secret follows."""
    if not text.isascii() and any(anchor in text for anchor in CHINESE_ANCHORS):
        return True
    lowered = text.lower()
    for anchor in CASELESS_ANCHORS:  # a loop, not any(): this runs for every stored model
        if anchor in lowered:
            return True
    return _names_member(lowered)


def _names_member(lowered: str) -> bool:
    """Whether ``lowered`` holds a JSON member named as ``MEMBER_ANCHORS`` list."""
    for plain, escaped, anchors in _MEMBER_CHECKS:
        if plain in lowered or escaped in lowered:
            for anchor in anchors:
                if anchor in lowered:
                    return True
    return False


_JSON_OPENER = re.compile(r"[{\[]")
_JSON_TRIES = 64
"""How many places a text's JSON may start at that are tried (each a decode that failed at
worst): a text of braces is not decoded from each of them."""
_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/]))')


def _may_hold_json(value: str) -> bool:
    """Whether ``value`` may hold JSON whose escapes, lists or objects hide a secret.

    Any name that says a secret follows counts (``password``, ``secrets``, ``credentials``
    as much as ``api_token``): a list or object under it is redacted by its name, decoded
    or, in JSON cut short, where it stands (``_secret_containers_marked``).
    """
    if "{" not in value and "[" not in value:
        return False
    return "\\" in value or _names_a_secret(value)


_CONTAINER_MEMBER = re.compile(r'"((?:[^"\\\n]|\\.){1,64})"\s*:\s*(?=[\[{])')
"""A JSON member whose value is a list or an object (its name in group 1)."""


def _secret_containers(text: str) -> Iterator[tuple[int, int, int]]:
    """Each list or object under a secret-named member: its member's start, its own, its end.

    Found in the text, whether or not it decodes: in JSON cut short, one left open runs to
    the end of the text.
    """
    done = 0
    for member in _CONTAINER_MEMBER.finditer(text):
        if member.start() < done or _SECRET_KEY.fullmatch(_unescaped(member[1])) is None:
            continue
        end = _container_end(text, member.end())
        closed = text[end - 1] in "]}" and end - member.end() >= 2
        if closed and not text[member.end() + 1 : end - 1].strip():
            continue  # empty: left as it is, as a decoded one is (``_names_secret``)
        done = end
        yield member.start(), member.end(), done


def _container_end(text: str, start: int) -> int:
    """Where the list or object opening at ``start`` ends (the text's end if it never does)."""
    depth, inside, at = 0, False, start
    while at < len(text):
        char = text[at]
        if inside:
            if char == "\\":
                at += 1
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return at + 1
        at += 1
    return len(text)


def _secret_containers_marked(text: str) -> str | None:
    """``text`` with each list or object under a secret-named member made the mark (or None)."""
    pieces: list[str] = []
    done = 0
    for _, value, end in _secret_containers(text):
        pieces += (text[done:value], f'"{MARK}"')
        done = end
    if not pieces:
        return None
    return "".join(pieces) + text[done:]


USER_PATTERN_CONTEXT_CHARS = 256
"""How far around a secret a user's pattern may look (to the ends of its line)."""


def _line_start(text: str, at: int) -> int:
    """Where the line holding ``at`` starts, or ``USER_PATTERN_CONTEXT_CHARS`` before it."""
    floor = max(at - USER_PATTERN_CONTEXT_CHARS, 0)
    return text.rfind("\n", floor, at) + 1 or floor


def _line_end(text: str, at: int) -> int:
    """Where the line holding ``at`` ends, or ``USER_PATTERN_CONTEXT_CHARS`` after it."""
    ceiling = min(at + USER_PATTERN_CONTEXT_CHARS, len(text))
    found = text.find("\n", at, ceiling)
    return ceiling if found < 0 else found


def _unescaped_with_places(value: str) -> tuple[str, list[int] | None]:
    """``_unescaped(value)``, and where each of its characters (and its end) is in ``value``.

    ``None`` for the places when nothing was escaped (the text is ``value`` itself).
    """
    if "\\" not in value:
        return value, None
    pieces: list[str] = []
    places: list[int] = []
    done = 0
    for match in _ESCAPE.finditer(value):
        start = match.start()
        pieces.append(value[done:start])
        places.extend(range(done, start))
        pieces.append(chr(int(match[1], 16)) if match[1] else match[2])
        places.append(start)
        done = match.end()
    if done == 0:
        return value, None
    pieces.append(value[done:])
    places.extend(range(done, len(value) + 1))  # the end maps to the end
    return "".join(pieces), places


def _unescaped(value: str) -> str:
    """``value`` with JSON's escapes of characters, quotes, backslashes and slashes undone."""
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else m[2], value)


def _names_secret(key: object, value: object) -> bool:
    """Whether a dictionary's ``key`` names its ``value`` a secret (``SECRET_NAMES``).

    A string, a number (not a boolean) or a list or dictionary that holds something; the
    mark itself and empty values are left as they are.
    """
    if isinstance(value, bool) or value is None or value == "" or value == MARK:
        return False
    if not isinstance(value, str | int | float | list | tuple | dict) or (
        isinstance(value, list | tuple | dict) and not value
    ):
        return False
    return isinstance(key, str) and _SECRET_KEY.fullmatch(key) is not None


def _marked(match: re.Match[str]) -> str:
    """What a secret is replaced by: the mark, after what its pattern keeps (``KEPT_GROUPS``)."""
    if match.lastgroup is None:
        return MARK
    groups = match.groupdict()
    kept = "".join(groups.get(name) or "" for name in KEPT_GROUPS)
    if groups.get("kept_number"):  # a number's place in JSON: the mark as a string
        return f'{kept}"{MARK}"'
    return f"{kept}{MARK}{groups.get('kept_at') or ''}"


@functools.cache
def _literal_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields of ``model`` whose type is a ``Literal``: a redacted value would be invalid."""
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if typing.get_origin(field.annotation) is typing.Literal
    )
