"""A calculator that evaluates arithmetic by walking an allowlisted AST.

Nothing is ``eval``-ed: only numbers, the four operations, ``//``, ``%``, ``**``, unary signs,
a few math functions and the constants ``pi``, ``e`` and ``tau`` are accepted. Exponents and
integer sizes are capped before the work is done, so ``9**9**9`` is refused instead of
freezing the process.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.errors import ToolExecutionError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ToolContext
from providers.builtin_tools.model_tool import ModelArgumentsTool

MAX_EXPRESSION_CHARS = 500
MAX_INTEGER_BITS = 4096
"""About 1,233 decimal digits; larger integer results are refused."""
MAX_EXPONENT = 10_000
MAX_NODES = 200

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


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely.

    Raises:
        CalculationError: Syntax outside the allowlist, a size cap, or a math error.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not a valid expression: {exc.msg}") from exc
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculationError(f"expression has more than {MAX_NODES} parts")
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
        return _check_size(_FUNCTIONS[node.func.id](*args))
    raise CalculationError(f"{ast.unparse(node)!r} is not allowed in an arithmetic expression")


def format_number(value: Number) -> str:
    """Integers exactly; floats without float noise (``0.1 + 0.2`` gives ``0.3``)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


class CalculatorArguments(BaseModel):
    """Arguments of ``calculator``."""

    model_config = ConfigDict(extra="forbid")

    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="Arithmetic such as '(17 * 23) + 4' or 'sqrt(2) ** 3'; ** is power.",
    )


class CalculatorTool(ModelArgumentsTool[CalculatorArguments]):
    """Exact arithmetic for the model, which is bad at it."""

    name: ClassVar[str] = "calculator"
    description: ClassVar[str] = (
        "Evaluate an arithmetic expression exactly. Supports + - * / // % **, parentheses, "
        "sqrt, exp, log, log10, log2, sin, cos, tan, asin, acos, atan, floor, ceil, abs, round, "
        "min, max, factorial and the constants pi, e, tau."
    )
    arguments_model: ClassVar[type[BaseModel]] = CalculatorArguments
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> CalculatorTool:
        """The calculator needs no settings."""
        return cls()

    async def execute(self, args: CalculatorArguments, context: ToolContext) -> str:
        """Evaluate ``args.expression``."""
        try:
            return format_number(evaluate(args.expression))
        except CalculationError as exc:
            raise ToolExecutionError(str(exc), tool_name=self.name) from exc
