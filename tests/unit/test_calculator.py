import pytest
from hypothesis import given
from hypothesis import strategies as st

from core_agent.contracts.errors import ToolExecutionError
from core_agent.contracts.tool import ToolContext
from providers.builtin_tools.calculator import CalculationError, CalculatorTool, evaluate

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("17 * 23 + 4", "395"),
        ("(2 + 3) ** 2", "25"),
        ("0.1 + 0.2", "0.3"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("sqrt(16) + max(1, 5)", "9"),
        ("2 ** 100", str(2**100)),
        ("round(pi, 4)", "3.1416"),
        ("10 / 4", "2.5"),
    ],
)
async def test_arithmetic_is_exact(expression: str, expected: str) -> None:
    tool = CalculatorTool()
    ctx = ToolContext(task_id="t", session_id="s", call_id="c")
    assert await tool.invoke(tool.validate_arguments({"expression": expression}), ctx) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('id')",
        "open('/etc/passwd')",
        "(1).__class__",
        "x + 1",
        "[1, 2]",
        "lambda: 1",
        "9 ** 9 ** 9",
        "2 ** 100000",
        "10 ** 5000",
        "factorial(100000)",
        "1 / 0",
        "1e308 * 10",
        "sqrt(-1)",
        "True + 1",
        "'a' * 3",
        "1 +",
        "1" * 600,
    ],
)
def test_anything_but_bounded_arithmetic_is_refused(expression: str) -> None:
    with pytest.raises(CalculationError):
        evaluate(expression)


async def test_refusals_reach_the_model_as_tool_errors() -> None:
    tool = CalculatorTool()
    ctx = ToolContext(task_id="t", session_id="s", call_id="c")
    with pytest.raises(ToolExecutionError, match="not allowed"):
        await tool.invoke(tool.validate_arguments({"expression": "os.getcwd()"}), ctx)


@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6), st.sampled_from("+-*"))
def test_integer_arithmetic_matches_python(a: int, b: int, op: str) -> None:
    assert evaluate(f"({a}) {op} ({b})") == eval(f"({a}) {op} ({b})")
