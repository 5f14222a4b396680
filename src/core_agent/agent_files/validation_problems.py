"""Pydantic's validation errors as agent-file problems: a line, a column and plain words.

Pydantic says where a value failed as a path (``('strategy', 'max_turns')``); the YAML
document turns the path into a line and column. An unknown key is located at the key and
answered with the closest accepted key (``difflib``) or the list of accepted ones; a word
outside a fixed set with the accepted words and the closest one.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from core_agent.agent_files.problems import AgentFileProblem
from core_agent.agent_files.schema import AgentFileSpec
from core_agent.agent_files.yaml_document import Loc, YamlDocument
from core_agent.contracts.settings import PREFIX, AgentSettings

_SECRET_KEYS = frozenset({"api_key", "model_api_key", "embedding_api_key", "key", "token"})
_PLAIN_WORDS = {
    "model_type": "expected a mapping of keys",
    "dict_type": "expected a mapping of keys",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
}
_CHOICE_SEPARATOR = re.compile(r", | or ")


def dotted(loc: Loc) -> str:
    """``('policy', 'rules', 0, 'risk')`` as ``policy.rules[0].risk``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def validation_problems(
    error: ValidationError, document: YamlDocument, *, limit: int
) -> list[AgentFileProblem]:
    """One problem per pydantic error, located in ``document``; the first ``limit`` of them.

    A last problem says how many more there were, when there were.
    """
    details = error.errors(include_url=False)
    problems = [problem_at(document, tuple(d["loc"]), d) for d in details[:limit]]
    if len(details) > limit:
        line, column = document.position(tuple(details[limit]["loc"]))
        problems.append(
            AgentFileProblem(line, column, f"{len(details) - limit} more problems not described")
        )
    return problems


def problem_at(document: YamlDocument, loc: Loc, detail: ErrorDetails) -> AgentFileProblem:
    """The problem one pydantic error describes, at its place in ``document``."""
    kind = detail["type"]
    if kind == "extra_forbidden":
        line, column = document.position(loc, key=True)
        return AgentFileProblem(line, column, _unknown_key(loc))
    if kind == "missing":
        line, column = document.position(loc[:-1])
        where = f" in {dotted(loc[:-1])}" if loc[:-1] else ""
        return AgentFileProblem(line, column, f"missing key {loc[-1]!r}{where}")
    line, column = document.position(loc)
    value = detail.get("input")
    if kind in ("literal_error", "enum"):
        choices = _choices(str((detail.get("ctx") or {}).get("expected", "")))
        return AgentFileProblem(line, column, f"{dotted(loc)}: {_not_one_of(value, choices)}")
    words = _PLAIN_WORDS.get(kind, detail["msg"])
    return AgentFileProblem(line, column, f"{dotted(loc)}: {words}{_got(value)}")


def close_match(word: str, accepted: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest accepted word, else the accepted words."""
    close = difflib.get_close_matches(word, accepted, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f"; accepted: {', '.join(accepted)}" if accepted else ""


def _unknown_key(loc: Loc) -> str:
    key, parent = str(loc[-1]), loc[:-1]
    where = f" in {dotted(parent)}" if parent else ""
    if key in _SECRET_KEYS:
        return (
            f"unknown key {key!r}{where}: keys and other secrets are not read from agent "
            f"files; set {PREFIX}MODEL_API_KEY (or the provider's own variable) in the "
            "environment"
        )
    accepted = _keys_at(parent)
    close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r}{where} (did you mean {close[0]!r}?)"
    if not parent and key in AgentSettings.model_fields:
        return (
            f"unknown key {key!r}: it is an installation setting, read from the environment "
            f"({PREFIX}{key.upper()}), not from agent files"
        )
    return f"unknown key {key!r}{where}{close_match(key, accepted)}"


def _not_one_of(value: Any, choices: Sequence[str]) -> str:
    shown = ", ".join(repr(choice) for choice in choices)
    hint = ""
    if isinstance(value, str) and choices:
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{value!r} is not accepted; use one of {shown}{hint}"


def _choices(expected: str) -> list[str]:
    """Pydantic's ``'a', 'b' or 'c'`` (or ``1 or 2``) as the words themselves."""
    return [part.strip().strip("'") for part in _CHOICE_SEPARATOR.split(expected) if part]


def _got(value: Any) -> str:
    if isinstance(value, dict):
        return " (got a mapping)"
    if isinstance(value, list):
        return " (got a list)"
    if isinstance(value, str | int | float | bool):
        return f" (got {value!r})"
    return ""


def _keys_at(loc: Loc) -> list[str]:
    """The keys the schema accepts in the mapping at ``loc``."""
    kind: Any = AgentFileSpec
    for part in loc:
        kind = _inner(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            if field is None:
                return []
            kind = field.annotation
        elif typing.get_origin(kind) in (list, tuple):
            kind = typing.get_args(kind)[0]
        elif typing.get_origin(kind) is dict:
            kind = typing.get_args(kind)[1]
        else:
            return []
    kind = _inner(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _inner(kind: Any) -> Any:
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``."""
    while True:
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (typing.Union, types.UnionType):
            options: Iterable[Any] = (a for a in typing.get_args(kind) if a is not type(None))
            kind = next(iter(options))
        else:
            return kind
