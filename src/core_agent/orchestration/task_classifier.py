"""Explainable features of a task, computed from its text and the tools on offer.

Deterministic and cheap (well under a millisecond): the text is cut into clauses at sentence
ends, list items and sequencing connectives ("then", "after that", "finally"...), and at
"and"/commas that introduce a new action verb. A clause that starts with an action or asks a
question is a sub-goal. Connectives that pass results along ("then", "based on that", "use
them") count as dependencies. Words that name a tool, or that its description is about, make
it a likely tool, and its risk comes from the policy engine when there is one, else from the
tool's declared capabilities.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core_agent.contracts.policy_engine import IPolicyEngine
from core_agent.contracts.tool import Capability, ToolSpec
from core_agent.orchestration import chinese_task_clauses as chinese
from shared.agent_protocol import RiskLevel
from shared.cjk_text import count_cjk, has_cjk

ACTION_VERBS = frozenset(
    """
    add adjust analyse analyze append archive assess attach back book build calculate categorize
    change chart check choose classify clean clone collect combine commit compare compile
    compose compute convert copy count create debug decide delete deploy describe design
    determine diff download draft edit email estimate evaluate execute explain export extract
    fetch file fill filter find fix forecast format gather generate get give go group highlight
    identify import insert install label list load locate log look map measure merge migrate
    modify monitor move notify open organize outline parse pick plan plot post predict prepare
    print produce profile propose publish pull push put rank read rebuild recommend record
    refactor remove rename render reorganize replace report research restore retrieve review
    rewrite run save scan schedule score scrape search select send set share show sort split
    start store submit suggest summarise summarize sync tag tell test track transform translate
    update upload use validate verify visualise visualize write zip aggregate answer apply
    approve assign benchmark buy call cancel close configure confirm crawl define delegate
    deduplicate detect draw enrich fit flag forward implement index ingest inspect invite join
    kill launch lint mark normalize optimise optimize order paste pay ping query reconcile
    refresh reject release remind reply resize resolve respond restart revert rotate sanitize
    setup sign simulate solve subscribe tally train tune tweet unzip upgrade watch
    """.split()
)
"""Verbs that open an instruction; inflected forms (-s, -ed, -ing) are folded to these."""

_QUESTION_WORDS = frozenset(
    "what which who whom whose when where why how is are does do can".split()
)
_SEQUENCE = re.compile(
    r"\b(?:and\s+then|then|after\s+that|afterwards|afterward|finally|lastly|subsequently|"
    r"followed\s+by|once\s+(?:that|done|finished|this)|when\s+(?:done|finished))\b"
    # "next" only as a connective ("..., next check"), not as in "the next train".
    r"|(?:^|[,;.:]\s*|\band\s+)next\b",
    re.IGNORECASE | re.MULTILINE,
)
_DATA_FLOW = re.compile(
    r"\b(?:based\s+on\s+(?:that|this|those|these|them|it|the\s+\w+)|"
    r"(?:using|use)\s+(?:that|this|those|these|them|it|"
    r"the\s+(?:results?|output|findings|data|list|summar\w+))|"
    r"from\s+(?:them|those|these)|with\s+(?:those|these)\s+\w+|for\s+each|each\s+one|"
    r"accordingly)\b",
    re.IGNORECASE,
)
_ORDINALS = re.compile(
    # Only where a sentence starts: "First, ...", not "the first line".
    r"(?:^|[.;:!?]\s+)(?:first|second|third|fourth|fifth)(?:ly)?\b",
    re.IGNORECASE | re.MULTILINE,
)
_LIST_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022]|[a-z][.)])\s+", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_STOP = frozenset(
    """a an and are as at be by for from has have in into is it its of on or that the this to
    with your you my me our we i all any each""".split()
)

_CAPABILITY_RISK = {
    Capability.EXEC: RiskLevel.HIGH,
    Capability.WRITE: RiskLevel.MEDIUM,
    Capability.NETWORK: RiskLevel.MEDIUM,
    Capability.READ: RiskLevel.LOW,
}


@dataclass(frozen=True, slots=True)
class TaskFeatures:
    """What the router decides on; every field is shown to users tuning thresholds."""

    sub_goals: int
    dependencies: int
    list_items: int
    context_tokens: int
    tools_available: int
    likely_tools: tuple[str, ...] = ()
    risk: RiskLevel = RiskLevel.LOW
    clauses: tuple[str, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready features (risk as its name)."""
        # Field by field: ``asdict`` deep-copies each value, and every task is routed.
        return {
            "sub_goals": self.sub_goals,
            "dependencies": self.dependencies,
            "list_items": self.list_items,
            "context_tokens": self.context_tokens,
            "tools_available": self.tools_available,
            "likely_tools": list(self.likely_tools),
            "risk": self.risk.value,
            "clauses": list(self.clauses),
        }


def _lemma(word: str) -> str:
    word = word.lower()
    if word in ACTION_VERBS:
        return word
    for suffix, replacement in (
        ("ies", "y"),
        ("ied", "y"),
        ("ing", ""),
        ("ing", "e"),
        ("ed", ""),
        ("ed", "e"),
        ("es", ""),
        ("s", ""),
    ):
        if word.endswith(suffix):
            stem = word[: -len(suffix)] + replacement
            if stem in ACTION_VERBS:
                return stem
            if len(stem) > 2 and stem[-1] == stem[-2] and stem[:-1] in ACTION_VERBS:
                return stem[:-1]  # "mapped" -> "map"
    return word


def _is_action_word(word: str) -> bool:
    return _lemma(word) in ACTION_VERBS


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


_LEAD_IN = frozenset("please then and also now finally next first lastly so just".split())
_CONNECTIVES = frozenset("and then or also finally lastly afterwards after that".split())
_TRAILING_CONNECTIVES = re.compile(r"(?:[\s,]+(?:and|then|or|also|finally|next|lastly))+\s*$", re.I)


_INVITES = frozenset("to you me us please".split())
"""Words after which an instruction's verb follows: "I need you to find", "help me write"."""


def _opens_with_action(clause: str) -> bool:
    words = [w.lower() for w in _words(clause)]
    # Skip courtesy and sequencing lead-ins: "please then summarize", "and finally send".
    while words and words[0] in _LEAD_IN:
        words = words[1:]
    if not words:
        return False
    if _is_action_word(words[0]) or words[0].split("'")[0] in _QUESTION_WORDS:
        return True
    head = words[:8]
    return any(
        word in _INVITES and _is_action_word(following)
        for word, following in itertools.pairwise(head)
    )


def _split_on_new_actions(sentence: str) -> list[str]:
    """Cut at ", X" / " and X" / " then X" when X is an action verb (a new instruction)."""
    parts: list[str] = []
    current: list[str] = []
    pending_break = False
    for token in re.split(r"(\s+|,)", sentence):
        if not token or token.isspace():
            current.append(token)
            continue
        lowered = token.lower().strip(".;:!?'\"")
        if token == "," or (lowered in _CONNECTIVES and current):
            # A comma or connective may introduce a new instruction; connectives in a row
            # ("and then", ", and finally") keep the break pending.
            pending_break = True
            current.append(token)
            continue
        if pending_break and _is_action_word(lowered) and "".join(current).strip(" ,"):
            parts.append("".join(current))
            current = []
        pending_break = False
        current.append(token)
    if current:
        parts.append("".join(current))
    cleaned = (_TRAILING_CONNECTIVES.sub("", part).strip(" ,") for part in parts)
    return [part for part in cleaned if part]


def _estimated_tokens(text: str) -> int:
    # About four characters a token in English, but about one a token for Chinese in the
    # tokenizers models use (cl100k_base: 1.0-1.5 per Han character).
    cjk = count_cjk(text)
    return max(1, cjk + math.ceil((len(text) - cjk) / 4))


class TaskClassifier:
    """Computes ``TaskFeatures``; pass a policy engine to grade likely tools by policy."""

    def __init__(self, policy: IPolicyEngine | None = None) -> None:
        self._policy = policy

    def classify(self, task: str, tools: Sequence[ToolSpec] = ()) -> TaskFeatures:
        """Features of ``task`` given the tools it may use."""
        text = task.strip()
        list_items = len(_LIST_ITEM.findall(text))
        body = _LIST_ITEM.sub("", text)
        sentences = [s for s in _SENTENCE_END.split(body) if s and s.strip()]
        dependencies = (
            len(_SEQUENCE.findall(body))
            + len(_DATA_FLOW.findall(body))
            + len(_ORDINALS.findall(body))
        )
        if has_cjk(body):
            # Chinese (and Japanese) clauses have no spaces to split on: their own rules,
            # with the English ones still applied to each clause for mixed text.
            clauses = chinese.clauses(body)
            actionable = [c for c in clauses if chinese.is_sub_goal(c) or _opens_with_action(c)]
            list_items += chinese.enumerated_items(body)
            dependencies += chinese.dependencies(clauses)
        else:
            clauses = []
            for sentence in sentences:
                clauses.extend(_split_on_new_actions(sentence))
            actionable = [c for c in clauses if _opens_with_action(c)]
        sub_goals = max(1, len(actionable), list_items)
        likely = self._likely_tools(text, tools)
        return TaskFeatures(
            sub_goals=sub_goals,
            dependencies=dependencies,
            list_items=list_items,
            context_tokens=_estimated_tokens(text),
            tools_available=len(tools),
            likely_tools=tuple(spec.name for spec in likely),
            risk=self._risk(likely),
            clauses=tuple(actionable),
        )

    @staticmethod
    def _likely_tools(text: str, tools: Sequence[ToolSpec]) -> list[ToolSpec]:
        words = {_lemma(w) for w in _words(text)} - _STOP
        likely = []
        for spec in tools:
            name_parts = {_lemma(p) for p in re.split(r"[_\-]", spec.name) if p} - _STOP
            described = {_lemma(w) for w in _words(spec.description)} - _STOP
            if name_parts & words or len(described & words) >= 2:
                likely.append(spec)
        return likely

    def _risk(self, likely: Sequence[ToolSpec]) -> RiskLevel:
        risk = RiskLevel.LOW
        for spec in likely:
            if self._policy is not None:
                level = self._policy.evaluate(spec, {}).risk
            else:
                level = max(
                    (_CAPABILITY_RISK[c] for c in spec.capabilities),
                    key=lambda r: r.rank,
                    default=RiskLevel.LOW,
                )
            if level.rank > risk.rank:
                risk = level
        return risk
