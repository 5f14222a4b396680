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

Compiling is not matching, and has no time limit: ``regex`` writes out the repetitions a
pattern requires, so ``(?:a{3000}){1000}`` (22 characters) takes a second and 900 MB to
compile. ``pattern_problem`` refuses, when the tool is listed, a pattern whose required
repetitions written out exceed ``MAX_UNROLLED`` (patterns that size compiled in 2 ms at most
and under a megabyte here); a call compiles only patterns within it, and counts the
compile against the call's time.

RE2 was tried first and refused real servers' tools (lookahead in zod's email pattern,
``\uXXXX`` ranges such as ``[\u4e00-\u9fa5]``).
"""

from __future__ import annotations

import functools
import importlib
import re
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

MAX_UNROLLED = 2_000
r"""Pattern elements with each repetition's required count written out (``x{4}`` is 4,
``(?:ab){2,}`` 4, ``[a-z]{1,255}`` 1): a hostname's ``(?:[a-z0-9-]{1,63}\.){1,127}`` is 2, a
date's ``\d{4}-\d{2}-\d{2}`` 10."""

_RE_PARSER: Any = importlib.import_module("re._parser")
"""The standard library's pattern parser (private, and so untyped): a pattern the schema's own
check accepted parses here, and ``regex`` reads it alike."""

_DEADLINE: ContextVar[float | None] = ContextVar("core_agent_mcp_pattern_deadline", default=None)


@contextmanager
def match_time_limit() -> Iterator[None]:
    """Give the pattern matches inside the block ``MATCH_TIME_LIMIT_S`` between them."""
    token = _DEADLINE.set(time.monotonic() + MATCH_TIME_LIMIT_S)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def pattern_problem(pattern: str) -> str | None:
    """Why compiling ``pattern`` could stall the kernel, else ``None`` (see ``MAX_UNROLLED``).

    A pattern that does not parse is no problem here (the schema's check says so).
    """
    try:
        parsed = _RE_PARSER.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    size = _unrolled(parsed.data)
    if size > MAX_UNROLLED:
        return (
            f"repeats to {size} elements at the least (at most {MAX_UNROLLED}: compiling it "
            "would stall the kernel)"
        )
    return None


def _unrolled(items: Any) -> int:
    # Stops counting a little past the bound: a product of counts may be astronomical.
    total = 0
    for op, value in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            least, _, sub = value
            total += max(least, 1) * _unrolled(sub.data)
        elif name == "SUBPATTERN":
            total += _unrolled(value[-1].data)
        elif name == "BRANCH":
            total += sum(_unrolled(branch.data) for branch in value[1])
        elif name in ("ASSERT", "ASSERT_NOT"):
            total += _unrolled(value[1].data)
        elif name == "ATOMIC_GROUP":
            total += _unrolled(value.data)
        elif name == "GROUPREF_EXISTS":
            total += sum(_unrolled(branch.data) for branch in value[1:] if branch is not None)
        else:
            total += 1
        if total > MAX_UNROLLED:
            return total
    return total


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    # A pattern the listing did not see (the validator is handed its schema's own only) is
    # refused rather than compiled without bound.
    problem = pattern_problem(pattern)
    if problem is not None:
        raise regex.error(problem)
    return regex.compile(pattern, regex.VERSION0)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``.

    Raises:
        ValidationError: The pattern does not compile, or the time left for the call's
            patterns (``match_time_limit``, else ``MATCH_TIME_LIMIT_S`` for this one) ran out.
    """
    deadline = _DEADLINE.get()
    try:
        # Compiled before the time is looked at: the compile (bounded by ``MAX_UNROLLED``)
        # is spent from the call's time like the matching.
        compiled = _compiled(pattern)
        left = MATCH_TIME_LIMIT_S if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return compiled.search(text, timeout=left) is not None
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
