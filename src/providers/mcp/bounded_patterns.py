r"""JSON Schema validation whose regular expressions cannot stall the event loop.

An MCP server's input schema is checked on the event loop before every call of its tools.
``jsonschema`` matches ``pattern`` and ``patternProperties`` with Python's ``re``, which
backtracks without bound: a server's ``^(a|aa)+$`` against a 40-character argument stalls the
kernel for seconds, and each more character doubles it. Here those keywords (and
``additionalProperties``, which consults ``patternProperties``) match with the ``regex``
package, which reads the same patterns as ``re`` (lookarounds, ``\uXXXX``, Unicode ``\w``:
what the server itself accepts, zod's email pattern included) and gives up after
``MATCH_TIME_LIMIT_S`` for all of a call's arguments: an argument whose match runs out of
time fails its check, and says so. A pattern that does not compile is refused with its
schema when the tool is listed (``jsonschema``'s own check of the schema).

RE2 was tried first and refused real servers' tools (lookahead in zod's email pattern,
``\uXXXX`` ranges such as ``[\u4e00-\u9fa5]``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import regex
from jsonschema import ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend

MATCH_TIME_LIMIT_S = 0.05
"""Longest the patterns may take on one call's arguments, all together (a sane pattern takes
microseconds): a limit per string would let a long array of them stall the loop."""

_DEADLINE: ContextVar[float | None] = ContextVar("core_agent_mcp_pattern_deadline", default=None)


@contextmanager
def match_time_limit() -> Iterator[None]:
    """Give the pattern matches inside the block ``MATCH_TIME_LIMIT_S`` between them."""
    token = _DEADLINE.set(time.monotonic() + MATCH_TIME_LIMIT_S)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern, regex.VERSION0)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``.

    Raises:
        ValidationError: The pattern does not compile, or the time left for the call's
            patterns (``match_time_limit``, else ``MATCH_TIME_LIMIT_S`` for this one) ran out.
    """
    deadline = _DEADLINE.get()
    left = MATCH_TIME_LIMIT_S if deadline is None else deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError
        return _compiled(pattern).search(text, timeout=left) is not None
    except regex.error as exc:
        raise ValidationError(f"the schema's pattern {pattern!r} is invalid: {exc}") from None
    except TimeoutError:
        raise ValidationError(
            f"{text[:80]!r} could not be checked against {pattern!r} in time "
            f"({MATCH_TIME_LIMIT_S * 1000:g} ms for the call's arguments)"
        ) from None


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string"):
        try:
            matched = search(pattern, instance)
        except ValidationError as exc:
            yield exc
            return
        if not matched:
            yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                matched = search(pattern, key)
            except ValidationError as exc:
                yield exc
                continue
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Validator, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for key in instance:
        if key in named:
            continue
        try:
            if any(search(p, key) for p in patterns):
                continue
        except ValidationError as exc:
            yield exc
            continue
        extras.append(key)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(each) for each in sorted(extras, key=str))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


def with_bounded_patterns(validator_class: type[Validator]) -> type[Validator]:
    """``validator_class`` with its regular-expression keywords matched in bounded time."""
    return extend(  # type: ignore[no-any-return]
        validator_class,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
