"""Arithmetic by walking an allowlisted AST: the calculator's checker and evaluator.

Nothing is ``eval``-ed: only numbers, the four operations, ``//``, ``%``, ``**``, unary signs,
a few math functions and the constants ``pi``, ``e`` and ``tau`` are accepted. ``check``
refuses, without computing anything, what is outside the allowlist or obviously too large
(``9**9**9``, ``round(7, -10**7)``); ``evaluate`` also caps every intermediate result.

Standard library only, and runnable as a script: the calculator tool evaluates in a worker
process (``python -I -S arithmetic.py`` reading one expression on stdin), so that a time
limit or a cancel really stops a computation the checks did not foresee.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import sys
from collections.abc import Callable

MAX_EXPRESSION_CHARS = 500
MAX_INTEGER_BITS = 4096
"""About 1,233 decimal digits; larger integer results are refused."""
MAX_EXPONENT = 10_000
MAX_NODES = 200
MAX_ROUND_DIGITS = 1000

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "floor": math.floor,
    "ceil": math.ceil,
    "factorial": math.factorial,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_ALLOWED_NODES = (
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.BinOp,
    ast.UnaryOp,
    ast.Call,
    *_BINARY,
    *_UNARY,
)


class CalculationError(ValueError):
    """The expression is not allowed or cannot be computed."""


def _check_size(value: Number) -> Number:
    if isinstance(value, bool):
        raise CalculationError("booleans are not numbers here")
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:
        raise CalculationError(f"result exceeds {MAX_INTEGER_BITS} bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("result is not a finite number")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculationError(f"exponent {exponent} exceeds {MAX_EXPONENT}")
    # Estimate an integer result's size before computing it.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and max(base.bit_length() - 1, 0) * exponent > MAX_INTEGER_BITS
    ):
        raise CalculationError(f"result exceeds {MAX_INTEGER_BITS} bits")
    return base**exponent


def check(expression: str) -> ast.Expression:
    """The parsed expression, refused when it is not allowed or cannot be bounded.

    Pure and fast: nothing is computed beyond literal constants.

    Raises:
        CalculationError: Why the expression is refused.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not a valid expression: {exc.msg}") from exc
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculationError(f"expression has more than {MAX_NODES} parts")
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree.body):
        if not isinstance(node, _ALLOWED_NODES):
            raise CalculationError(
                f"{ast.unparse(node)!r} is not allowed in an arithmetic expression"
            )
        if isinstance(node, ast.Name) and node.id not in _CONSTANTS and id(node) not in called:
            raise CalculationError(f"unknown name {node.id!r}")
        if isinstance(node, ast.Constant) and (
            isinstance(node.value, bool) or not isinstance(node.value, int | float)
        ):
            raise CalculationError(f"{node.value!r} is not a number")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
                raise CalculationError(f"{ast.unparse(node.func)!r} is not allowed as a function")
            if node.keywords:
                raise CalculationError("keyword arguments are not allowed")
            if node.func.id == "round" and len(node.args) == 2:
                digits = _literal(node.args[1])
                if digits is not None and abs(digits) > MAX_ROUND_DIGITS:
                    raise CalculationError(f"round() to more than {MAX_ROUND_DIGITS} digits")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = _literal(node.right)
            if exponent is not None and abs(exponent) > MAX_EXPONENT:
                raise CalculationError(f"exponent {exponent} exceeds {MAX_EXPONENT}")
    return tree


def _literal(node: ast.expr) -> float | None:
    """The value of a (signed) numeric literal, else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _literal(node.operand)
        if inner is not None:
            return -inner if isinstance(node.op, ast.USub) else inner
    return None


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely (``check`` first).

    Raises:
        CalculationError: Syntax outside the allowlist, a size cap, or a math error.
    """
    tree = check(expression)
    try:
        return _eval(tree.body)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
        if isinstance(exc, CalculationError):
            raise
        raise CalculationError(f"{type(exc).__name__}: {exc}") from exc


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return _check_size(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        if (
            isinstance(node.op, ast.Mult)
            and isinstance(left, int)
            and isinstance(right, int)
            and left.bit_length() + right.bit_length() > MAX_INTEGER_BITS + 1
        ):
            raise CalculationError(f"result exceeds {MAX_INTEGER_BITS} bits")
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_size(_UNARY[type(node.op)](_eval(node.operand)))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(arg) for arg in node.args]
        if node.func.id == "factorial" and args and args[0] > 1000:
            raise CalculationError("factorial argument exceeds 1000")
        if node.func.id == "round" and len(args) == 2 and abs(args[1]) > MAX_ROUND_DIGITS:
            raise CalculationError(f"round() to more than {MAX_ROUND_DIGITS} digits")
        return _check_size(_FUNCTIONS[node.func.id](*args))
    raise CalculationError(f"{ast.unparse(node)!r} is not allowed in an arithmetic expression")


def format_number(value: Number) -> str:
    """Integers exactly; floats without float noise (``0.1 + 0.2`` gives ``0.3``)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def serve_one() -> int:
    """Worker entry: one JSON expression on stdin, ``{"result": ...}`` or ``{"error": ...}``."""
    try:
        expression = json.loads(sys.stdin.read())
        answer = {"result": format_number(evaluate(str(expression)))}
    except CalculationError as exc:
        answer = {"error": str(exc)}
    except (ValueError, RecursionError, MemoryError) as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(serve_one())
