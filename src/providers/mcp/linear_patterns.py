"""JSON Schema validation whose regular expressions run in linear time (RE2).

An MCP server's input schema is checked on the event loop before every call of its tools.
``jsonschema`` matches ``pattern`` and ``patternProperties`` with Python's ``re``, which
backtracks: a server's ``^(a+)+$`` against a 30-character argument stalls the kernel for
seconds, and each more character doubles it. Here those keywords (and
``additionalProperties``, which consults ``patternProperties``) match with RE2 instead. A
pattern RE2 cannot compile (a backreference, a lookaround) is refused when the tool is
listed, through ``schema_patterns``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import re2
from jsonschema import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=256)
def linear(pattern: str) -> Any:
    """``pattern`` compiled with RE2.

    Raises:
        ValueError: RE2 cannot compile it (the reason is in the message).
    """
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"its input schema's pattern {pattern!r} cannot be matched in linear time "
            f"(no backreferences or lookaround): {reason}"
        ) from None


def schema_patterns(schema: Any) -> Iterator[str]:
    """Every regular expression of ``schema``: ``pattern`` values, ``patternProperties`` keys."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            if isinstance(node.get("patternProperties"), dict):
                yield from (key for key in node["patternProperties"] if isinstance(key, str))
            stack.extend(v for k, v in node.items() if k not in ("const", "enum", "examples"))


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not linear(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if linear(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Validator, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [linear(p) for p in schema.get("patternProperties", {})]
    extras = [
        key for key in instance if key not in named and not any(p.search(key) for p in patterns)
    ]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(each) for each in sorted(extras, key=str))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


def with_linear_patterns(validator_class: type[Validator]) -> type[Validator]:
    """``validator_class`` with its regular-expression keywords matched by RE2."""
    return extend(  # type: ignore[no-any-return]
        validator_class,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
