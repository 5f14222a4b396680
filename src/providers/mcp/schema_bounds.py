"""How much work a server's input schema may cost the kernel, which checks it on its event loop.

A small schema can ask for exponential work: ``$defs`` levels ``d_i = {"allOf": [{"$ref":
d_{i+1}}, {"$ref": d_{i+1}}]}`` make 1.3 kB that ``jsonschema`` walks 2^18 times for one
string (seconds with the loop frozen, before any human is asked). Two bounds, both counted,
never timed:

* When the tool is listed, ``expanded_size`` counts the schema as if every reference were
  replaced by what it points to; beyond ``MAX_EXPANDED_NODES`` the tool is refused.
* When arguments are checked, every keyword the validator applies is one step, and a call
  gets ``BASE_STEPS`` plus ``STEPS_PER_VALUE`` for each value its arguments hold: work in
  proportion to what was given. A check that needs more (a schema that recurses with the
  arguments' depth, doubling at each level) stops there and fails the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote

from jsonschema.protocols import Validator
from jsonschema.validators import extend

MAX_EXPANDED_NODES = 5_000
"""Objects and arrays of a schema with its references expanded (a reference back into one
being expanded counts once). Real servers' schemas, shared ``$defs`` and all, stay in the
hundreds; the exponential schema above passes it at 11 levels."""
BASE_STEPS = 10_000
"""Keywords any call's check may apply (3 to 9 µs each here: under a tenth of a second)."""
STEPS_PER_VALUE = 50
"""And for each value of its arguments: an ordinary schema applies a few keywords to each
(a list of 2,000 five-field objects, 12,001 values, takes 26,000 steps), a union of object
shapes a few dozen."""

DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Their values are data, never schemas: nothing in them is followed."""
DEFINITIONS = frozenset({"$defs", "definitions"})
"""Schemas the validator reaches only through references: counted where they are referred to."""
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas", "dependencies"})
"""Their values map names to schemas: a name (``"enum"``, ``"$defs"``) is no keyword there."""

_STEPS_LEFT: ContextVar[list[int] | None] = ContextVar("core_agent_mcp_steps_left", default=None)


class TooMuchWork(Exception):
    """Checking the arguments needed more steps than ``step_budget`` gave."""


def reference_target(
    schema: Mapping[str, Any], ref: str, anchors: Mapping[str, Any] | None = None
) -> Any:
    """What ``ref`` points to inside ``schema`` (a JSON pointer or an anchor), else ``None``.

    Only ``#...`` references are followed: the kernel fetches nothing a server's schema names.
    ``anchors``: ``anchors_of(schema)``, when the caller already has it.
    """
    if not ref.startswith("#"):
        return None
    fragment = ref[1:]
    if fragment and not fragment.startswith("/"):
        return (anchors_of(schema) if anchors is None else anchors).get(unquote(fragment))
    target: Any = schema
    for raw in fragment.split("/")[1:]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    return target if isinstance(target, dict | bool) else None


def anchors_of(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema's named places: ``$anchor``, ``$dynamicAnchor``, draft 7's ``$id: "#name"``."""
    found: dict[str, Any] = {}
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                found.setdefault(node[key], node)
        if isinstance(node.get("$id"), str) and node["$id"].startswith("#"):
            found.setdefault(node["$id"][1:], node)
        stack.extend(value for key, value in node.items() if key not in DATA_KEYWORDS)
    return found


def expanded_size(schema: Mapping[str, Any], limit: int = MAX_EXPANDED_NODES) -> int:
    """The objects and arrays of ``schema`` with every ``#`` reference expanded in place.

    Each reference's expansion is counted once and remembered, so the count costs as much as
    the schema is long, however large the expansion. Counting stops a little past ``limit``
    (the result is then only known to exceed it).

    Raises:
        ValueError: References lead through each other too deeply to be counted (the
            validator could not follow them either).
    """
    anchors = anchors_of(schema)
    # By the node a reference points to: two spellings of one place are one expansion.
    sizes: dict[int, int] = {}
    expanding: set[int] = set()

    def size(node: Any, total: int, names: bool = False) -> int:
        # ``total``: what was counted before this node; past ``limit`` nothing more is walked.
        # ``names``: ``node`` maps names to schemas (the value of ``properties``...).
        if total > limit or not isinstance(node, dict | list):
            return 0
        count = 1
        if isinstance(node, list) or names:
            for item in node.values() if isinstance(node, dict) else node:
                count += size(item, total + count)
            return count
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                count += of_reference(value, total + count)
            elif key not in DATA_KEYWORDS and key not in DEFINITIONS:
                count += size(value, total + count, names=key in SCHEMA_MAPS)
        return count

    def of_reference(ref: str, total: int) -> int:
        target = reference_target(schema, ref, anchors)
        key = id(target)
        if key in expanding:
            return 1  # recursion: it takes the arguments' depth, which the steps bound
        if key not in sizes:
            expanding.add(key)
            try:
                sizes[key] = size(target, total)
            finally:
                expanding.discard(key)
        return sizes[key]

    try:
        return size(schema, 0)
    except RecursionError:
        raise ValueError("its input schema's references lead through too many others") from None


def steps_for(arguments: Any) -> int:
    """The steps a check of ``arguments`` may take: ``BASE_STEPS``, ``STEPS_PER_VALUE`` a value."""
    values = 0
    stack = [arguments]
    while stack:
        value = stack.pop()
        values += 1
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return BASE_STEPS + STEPS_PER_VALUE * values


@contextmanager
def step_budget(steps: int) -> Iterator[None]:
    """Let the validators inside the block apply ``steps`` keywords, then ``TooMuchWork``."""
    token = _STEPS_LEFT.set([steps])
    try:
        yield
    finally:
        _STEPS_LEFT.reset(token)


def with_step_budget(validator_class: type[Validator]) -> type[Validator]:
    """``validator_class`` whose every keyword spends a step of the current ``step_budget``."""
    return extend(  # type: ignore[no-any-return]
        validator_class,
        {keyword: _counted(check) for keyword, check in validator_class.VALIDATORS.items()},
    )


def _counted(check: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Validator, value: Any, instance: Any, schema: Any) -> Any:
        left = _STEPS_LEFT.get()
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise TooMuchWork
        return check(validator, value, instance, schema)

    return counted
