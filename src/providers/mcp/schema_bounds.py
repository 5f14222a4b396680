"""How much work a server's input schema may cost the kernel, which checks it on its event loop.

A small schema can ask for exponential work: ``$defs`` levels ``d_i = {"allOf": [{"$ref":
d_{i+1}}, {"$ref": d_{i+1}}]}`` make 1.3 kB that ``jsonschema`` walks 2^18 times for one
string (seconds with the loop frozen, before any human is asked). Two bounds, both counted,
never timed:

* When the tool is listed, ``expanded_size`` counts the schema as if every reference were
  replaced by what it points to, an ``enum`` as many as it lists; beyond
  ``MAX_EXPANDED_NODES`` the tool is refused.
* When arguments are checked, every keyword the validator applies is one step (an ``enum``
  one more for each value it lists: it compares the argument with each). Each value of the
  arguments has ``STEPS_PER_VALUE`` for the keywords applied to it, and the call
  ``BASE_STEPS`` shared by all (``step_budget``): work in proportion to what was given,
  where it was given. A check that needs more (a schema that recurses with the arguments'
  depth, doubling at each level) stops there and fails the call; a long argument lends
  nothing to it. Each step costs about as much as any other (a few µs), which the
  references below ensure.

References are resolved in the schema alone, against its root: ``reference_problem``
refuses at listing a schema holding an ``$id`` below its root (it would move the base the
validator resolves references against, so what the kernel counted would not be what it
checks; real servers' schemas have none) and any ``$ref``, ``$dynamicRef`` or
``$recursiveRef`` that does not point inside it. The validator's ``REGISTRY`` holds nothing
but the JSON Schema meta-schemas and retrieves nothing: a schema's URL is never fetched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote

from jsonschema import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

MAX_EXPANDED_NODES = 5_000
"""Objects and arrays of a schema with its references expanded (a reference back into one
being expanded counts once). Real servers' schemas, shared ``$defs`` and all, stay in the
hundreds; the exponential schema above passes it at 11 levels."""
BASE_STEPS = 10_000
"""Keywords any call's check may apply beyond its values' own (3 to 9 µs each here: under a
tenth of a second)."""
STEPS_PER_VALUE = 50
"""Keywords each value of the arguments may have applied to it: an ordinary schema applies a
few (a list of 2,000 five-field objects, 12,001 values, takes 26,000 steps), a union of
object shapes a few dozen."""

REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
"""Keywords whose value names another schema."""
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Their values are data, never schemas: nothing in them is followed."""
DEFINITIONS = frozenset({"$defs", "definitions"})
"""Schemas the validator reaches only through references: counted where they are referred to."""
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas", "dependencies"})
"""Their values map names to schemas: a name (``"enum"``, ``"$defs"``) is no keyword there."""

_STEPS_LEFT: ContextVar[_Steps | None] = ContextVar("core_agent_mcp_steps_left", default=None)


class TooMuchWork(Exception):
    """Checking the arguments needed more steps than ``step_budget`` gave."""


def _refuse_retrieval(uri: str) -> Resource[Any]:
    # jsonschema's default registry fetches an unknown URI with urllib, no timeout, on the
    # loop that checks the arguments: a server's schema would choose what the kernel fetches.
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs fields mypy cannot see


REGISTRY: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
"""For the validators of servers' schemas: nothing but each schema itself (jsonschema adds
it, and the meta-schemas), and nothing is ever retrieved."""


def subschemas(schema: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every object of ``schema`` that keywords may apply to, ``schema`` first.

    A name in ``properties`` and the like (``"enum"``, ``"default"``) is no keyword, and its
    value is walked as a schema; the values of ``DATA_KEYWORDS`` are not walked.
    """
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        node, names = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in reversed(node))
        elif isinstance(node, dict) and names:
            stack.extend((value, False) for value in node.values())
        elif isinstance(node, dict):
            yield node
            stack.extend(
                (value, key in SCHEMA_MAPS)
                for key, value in node.items()
                if key not in DATA_KEYWORDS
            )


def reference_problem(schema: Mapping[str, Any], id_keywords: tuple[str, ...]) -> str | None:
    """Why ``schema``'s references cannot be followed safely inside it, else ``None``.

    ``id_keywords``: what sets a base URI in the schema's dialect (``$id``, draft 4's ``id``).
    A base set below the root (a string not starting with ``#``, which draft 7 reads as an
    anchor) is refused, as is a reference keyword whose value does not point inside the
    schema (``reference_target``).
    """
    anchors = anchors_of(schema)
    for node in subschemas(schema):
        for key in id_keywords:
            base = node.get(key)
            if node is not schema and isinstance(base, str) and not base.startswith("#"):
                return f"sets the base URI {base!r} below its root ({key})"
        for key in REFERENCES:
            ref = node.get(key)
            if isinstance(ref, str) and reference_target(schema, ref, anchors) is None:
                return f"refers to {ref!r} ({key}), which it does not hold"
    return None


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
    for node in subschemas(schema):
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                found.setdefault(node[key], node)
        if isinstance(node.get("$id"), str) and node["$id"].startswith("#"):
            found.setdefault(node["$id"][1:], node)
    return found


def expanded_size(schema: Mapping[str, Any], limit: int = MAX_EXPANDED_NODES) -> int:
    """The objects and arrays of ``schema`` with every ``#`` reference expanded in place.

    An ``enum`` counts as many as the values it lists (checking an argument against it
    compares them all), a ``const`` as one.

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
            if key in REFERENCES and isinstance(value, str):
                count += of_reference(value, total + count)
            elif key == "enum" and isinstance(value, list):
                count += len(value)
            elif key == "const":
                count += 1
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


class _Steps:
    """What a check may still spend: each value's own steps, then the call's shared ones."""

    def __init__(self, arguments: Any) -> None:
        self.shared = BASE_STEPS
        # By object: arguments decoded from JSON share none (a value given twice, in Python,
        # is visited twice and gets its steps twice).
        self.own: dict[int, int] = {}
        self.total = BASE_STEPS
        stack = [arguments]
        while stack:
            value = stack.pop()
            self.own[id(value)] = self.own.get(id(value), 0) + STEPS_PER_VALUE
            self.total += STEPS_PER_VALUE
            if isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)

    def spend(self, instance: Any, steps: int) -> None:
        key = id(instance)
        own = self.own.get(key, 0)
        if own >= steps:
            self.own[key] = own - steps
            return
        if own:
            self.own[key] = 0
        self.shared -= steps - own
        if self.shared < 0:
            raise TooMuchWork


@contextmanager
def step_budget(arguments: Any) -> Iterator[int]:
    """Let the validators inside the block check ``arguments`` in bounded steps.

    Each value of ``arguments`` has ``STEPS_PER_VALUE`` steps of its own, spent by the
    keywords applied to it; past them, it spends from ``BASE_STEPS`` shared by the call; past
    those, ``TooMuchWork``. So a value's check costs what its own schema makes it cost, up to
    its share: a long argument adds nothing to what a deep one may spend (a 4,000-item
    padding array bought 1.4 s for a schema doubling the work at each level of another
    argument). Yields the steps the call has in all, for messages.
    """
    steps = _Steps(arguments)
    token = _STEPS_LEFT.set(steps)
    try:
        yield steps.total
    finally:
        _STEPS_LEFT.reset(token)


def with_step_budget(validator_class: type[Validator]) -> type[Validator]:
    """``validator_class`` whose every keyword spends steps of the current ``step_budget``.

    One step a keyword, and an ``enum`` one more for each value it lists. ``uniqueItems``
    takes time in proportion to the array (``_unique_items``), not to its square.
    """
    checks = dict(validator_class.VALIDATORS)
    if "uniqueItems" in checks:
        checks["uniqueItems"] = _unique_items
    return extend(  # type: ignore[no-any-return]
        validator_class,
        {keyword: _counted(keyword, check) for keyword, check in checks.items()},
    )


def _unique_items(validator: Validator, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # jsonschema compares each item with every other when they cannot be sorted (objects):
    # 1,000 objects took 1.2 s, 4,000 took 19 s, each step of one keyword. Each item's
    # equality key is made once and looked up.
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _equality_key(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _equality_key(value: Any) -> Any:
    """Equal for JSON values JSON Schema calls equal (``1`` and ``1.0``; not ``1`` and ``true``)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _equality_key(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_equality_key(item) for item in value))
    if value is None:
        return ("null",)
    return ("other", id(value))


def _counted(keyword: str, check: Callable[..., Any]) -> Callable[..., Any]:
    by_values = keyword == "enum"

    def counted(validator: Validator, value: Any, instance: Any, schema: Any) -> Any:
        steps = _STEPS_LEFT.get()
        if steps is not None:
            steps.spend(instance, 1 + (len(value) if by_values and isinstance(value, list) else 0))
        return check(validator, value, instance, schema)

    return counted
