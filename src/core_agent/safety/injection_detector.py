"""An advisory detector of prompt injection in tool output.

It looks for what injected text tends to carry: instruction-like phrasing aimed at the model,
chat role markers, invisible Unicode (format characters: zero-width, soft hyphens,
bidirectional overrides, tag characters) and encoded payloads that decode to such
instructions. Text with CJK characters is also checked against the Chinese phrasings
(``chinese_injection_patterns``). The phrasings are looked for in the text as a model reads
it: format characters removed (and counted), NFKC (full-width letters), Cyrillic and Greek
look-alikes read as Latin, Traditional characters read as Simplified, and the spaces between
Chinese characters closed. A hit is reported (event, span, a warning inside the spotlighted
block); it never blocks anything by itself. What stops an exfiltration is the policy: once
untrusted content is in context, write, exec and network calls need more approval.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from dataclasses import dataclass

from core_agent.safety.chinese_injection_patterns import (
    CHINESE_INSTRUCTIONS,
    CHINESE_ROLE_MARKERS,
    SPACE_BETWEEN_HAN,
    TRADITIONAL_TO_SIMPLIFIED,
)
from shared.cjk_text import has_cjk

_SECRETS = r"(?:api[_ ]?keys?|passwords?|secrets?|credentials|tokens?|ssh keys?|(?<![\w.])\.env)"
_INSTRUCTIONS = [
    (re.compile(p, re.IGNORECASE | re.DOTALL), label, weight)
    for p, label, weight in (
        (
            r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|"
            r"your|the)\b.{0,30}\b(instructions?|prompts?|rules|directions|guidelines)\b",
            "asks to ignore instructions",
            1.0,
        ),
        (
            r"\byou are (now|no longer)\b|\bfrom now on,? you\b|\bact as (an?|the)\b|"
            r"\bpretend (to be|you are)\b",
            "tries to change the assistant's role",
            0.6,
        ),
        (
            r"\b(new|updated|real|actual|hidden) (system )?(instructions?|prompt|task)\b",
            "announces new instructions",
            0.6,
        ),
        (r"\b(system prompt|developer mode|jailbreak|DAN mode)\b", "talks about the prompt", 0.5),
        (
            r"\b(do not|don't|never) (tell|inform|mention|reveal|show)\b.{0,30}\b(user|human)\b",
            "asks to hide something from the user",
            0.8,
        ),
        (
            r"\b(send|post|upload|forward|email|transmit|exfiltrate|leak)\b.{0,60}"
            r"(https?://|\bto\b.{0,20}@|\bwebhook\b)",
            "asks to send data somewhere",
            0.6,
        ),
        (
            rf"{_SECRETS}.{{0,60}}\b(send|post|include|append|reveal|print|share|leak)|"
            rf"\b(send|post|include|append|reveal|share|leak)\b.{{0,60}}{_SECRETS}",
            "asks for secrets",
            0.6,
        ),
        (r"\bcurl\b[^\n|]{0,200}\|\s*(ba)?sh\b|\brm -rf\b", "contains a dangerous command", 0.6),
        (
            r"\b(assistants?|ais?|models?|agents?|llms?|chatbots?)\b.{0,60}\b(must|should|will|shall)"
            r" (now |immediately )?(call|run|execute|send|use|fetch|write|delete)\b|"
            r"\byou (must|should) (now |immediately )?(call|run|execute|use) the \w+ tool\b",
            "gives the assistant orders",
            0.8,
        ),
        (r"\b(user|human)\s*:.{0,300}\b(assistant|ai)\s*:", "contains a fake dialogue", 0.6),
    )
]
_CHAT_TOKENS = re.compile(
    r"<\|im_start\|>|<\|im_end\|>|\[/?INST\]|<\|(system|user|assistant)\|>|"
    r"</?(system|assistant)>",
    re.IGNORECASE,
)
"""Chat-template tokens: no ordinary document contains them."""
_ROLE_MARKERS = re.compile(
    r"^\s*(system|assistant|user|developer)\s*:|^\s*#{2,}\s*(instruction|system)\b",
    re.IGNORECASE | re.MULTILINE,
)
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
"""Format characters (Unicode category Cf, written out: the standard library cannot name a
category in a pattern): invisible, so a word split by one still reads whole to a model."""
_VARIATION_SELECTORS = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")
"""Invisible too, but every emoji carries one: removed, not counted."""
_LOOK_ALIKE_LETTERS = "АВЕЅІЈКМНОРСТХҮаеіјорсхуѕԁһӏԛԝΑΒΕΖΗΙΚΜΝΟΡΤΥΧοινρ"
_LOOK_ALIKES = str.maketrans(
    _LOOK_ALIKE_LETTERS, "ABESIJKMHOPCTXYaeijopcxysdhlqwABEZHIKMNOPTYXoivp"
)
"""Cyrillic and Greek letters drawn as Latin ones: "Іgnore" (a Cyrillic І) is "Ignore"."""
# str.translate costs about 100 ns a character (20 ms for 200,000 of them), and almost no
# text holds any of these: a search for them is far cheaper.
_HAS_LOOK_ALIKE = re.compile(f"[{_LOOK_ALIKE_LETTERS}]")
_HAS_TRADITIONAL = re.compile("[" + "".join(chr(code) for code in TRADITIONAL_TO_SIMPLIFIED) + "]")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4}){8,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}){24,}\b")


@dataclass(frozen=True, slots=True)
class InjectionReport:
    """What the detector found; ``suspicious`` when the signals add up to the threshold."""

    signals: tuple[str, ...]
    score: float

    @property
    def suspicious(self) -> bool:
        """Whether the content should be flagged."""
        return self.score >= 1.0


class InjectionDetector:
    """Scores text; pure and fast (regular expressions over at most ``max_chars``)."""

    def __init__(self, *, max_chars: int = 200_000) -> None:
        self._max_chars = max_chars

    def inspect(self, text: str) -> InjectionReport:
        """Signals found in ``text`` and their combined score."""
        sample = text[: self._max_chars]
        signals: list[str] = []
        score = 0.0
        invisible = 0
        if not sample.isascii():
            sample, invisible = _as_read(sample)
        chinese = has_cjk(sample)
        if chinese:
            if _HAS_TRADITIONAL.search(sample):
                sample = sample.translate(TRADITIONAL_TO_SIMPLIFIED)
            sample = SPACE_BETWEEN_HAN.sub("", sample)
        patterns = _INSTRUCTIONS + CHINESE_INSTRUCTIONS if chinese else _INSTRUCTIONS
        for pattern, label, weight in patterns:
            if label not in signals and pattern.search(sample):
                signals.append(label)
                score += weight
        if _CHAT_TOKENS.search(sample):
            signals.append("contains chat-template role markers")
            score += 1.0
        elif _ROLE_MARKERS.search(sample) or (chinese and CHINESE_ROLE_MARKERS.search(sample)):
            signals.append("contains chat role markers")
            score += 0.6
        if invisible:
            signals.append(f"contains {invisible} invisible Unicode characters")
            score += 1.0 if invisible >= 3 else 0.5
        for decoded in _decoded_payloads(sample):
            inner = self.inspect(decoded) if len(decoded) < len(sample) else None
            if inner is not None and inner.signals:
                signals.append("an encoded payload decodes to: " + ", ".join(inner.signals))
                score += 1.0
                break
        return InjectionReport(tuple(signals), round(score, 2))


def _as_read(text: str) -> tuple[str, int]:
    """``text`` as a model reads it, and how many invisible characters it held.

    Format characters are removed (a zero-width space or a soft hyphen inside "Ignore" hid the
    word from the patterns), then NFKC makes full-width and other compatibility letters plain,
    and Cyrillic and Greek look-alikes are read as Latin.
    """
    text, invisible = _INVISIBLE.subn("", text)
    text = _VARIATION_SELECTORS.sub("", text)
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    if _HAS_LOOK_ALIKE.search(text):
        text = text.translate(_LOOK_ALIKES)
    return text, invisible


def _decoded_payloads(text: str) -> list[str]:
    payloads: list[str] = []
    for match in _BASE64.finditer(text):
        try:
            raw = base64.b64decode(match.group(0), validate=True)
        except (binascii.Error, ValueError):
            continue
        payloads.append(raw.decode("utf-8", "ignore"))
    for match in _HEX.finditer(text):
        payloads.append(bytes.fromhex(match.group(0)).decode("utf-8", "ignore"))
    # Only text is worth a second look; random bytes (hashes, keys) are not instructions.
    return [p for p in payloads if p and sum(c.isprintable() for c in p) / len(p) > 0.9]
