"""``calculator``: exact arithmetic for the model, which is bad at it.

The expression is checked statically first (``arithmetic.check``: the same check
``core-agent policy check`` reports), then evaluated in a short-lived worker process with a
time limit, so neither a slow computation nor a cancelled task can hold the kernel's event
loop: the process is killed when the limit passes or the call is cancelled.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.errors import ToolExecutionError, ToolTimeoutError
from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ToolAssessment, ToolContext
from providers.builtin_tools.arithmetic import (
    MAX_EXPRESSION_CHARS,
    CalculationError,
    check,
    evaluate,
    format_number,
)
from shared.agent_protocol import RiskLevel

__all__ = ["CalculationError", "CalculatorTool", "evaluate", "format_number"]

WORKER = Path(__file__).with_name("arithmetic.py")
TIME_LIMIT_S = 5.0


class CalculatorArguments(BaseModel):
    """Arguments of ``calculator``."""

    model_config = ConfigDict(extra="forbid")

    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="Arithmetic such as '(17 * 23) + 4' or 'sqrt(2) ** 3'; ** is power.",
    )


class CalculatorTool(ModelArgumentsTool[CalculatorArguments]):
    """Exact arithmetic, checked statically and evaluated in a worker process."""

    name: ClassVar[str] = "calculator"
    description: ClassVar[str] = (
        "Evaluate an arithmetic expression exactly. Supports + - * / // % **, parentheses, "
        "sqrt, exp, log, log10, log2, sin, cos, tan, asin, acos, atan, floor, ceil, abs, round, "
        "min, max, factorial and the constants pi, e, tau."
    )
    arguments_model: ClassVar[type[BaseModel]] = CalculatorArguments
    idempotent: ClassVar[bool] = True

    def __init__(self, *, time_limit_s: float = TIME_LIMIT_S, worker: Path = WORKER) -> None:
        super().__init__()
        self._time_limit_s = time_limit_s
        self._worker = worker

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> CalculatorTool:
        """The calculator needs no settings."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse what ``arithmetic.check`` refuses; arithmetic is otherwise harmless."""
        args: CalculatorArguments = arguments["args"]
        try:
            check(args.expression)
        except CalculationError as exc:
            return ToolAssessment(refusal=str(exc))
        return ToolAssessment(risk=RiskLevel.LOW)

    async def execute(self, args: CalculatorArguments, context: ToolContext) -> str:
        """Check, then evaluate ``args.expression`` in a worker process."""
        try:
            check(args.expression)
        except CalculationError as exc:
            raise ToolExecutionError(str(exc), tool_name=self.name) from exc
        command = [sys.executable, "-I", "-S", str(self._worker)]
        with anyio.move_on_after(self._time_limit_s) as scope:
            # run_process kills the worker when this scope (or the task) is cancelled.
            finished = await anyio.run_process(
                command, input=json.dumps(args.expression).encode(), check=False
            )
        if scope.cancelled_caught:
            raise ToolTimeoutError(
                f"the calculation did not finish within {self._time_limit_s:g} s and was "
                "stopped; simplify the expression",
                tool_name=self.name,
            )
        try:
            answer = json.loads(finished.stdout)
        except ValueError as exc:
            raise ToolExecutionError(
                f"the calculation failed (exit {finished.returncode})", tool_name=self.name
            ) from exc
        if "error" in answer:
            raise ToolExecutionError(str(answer["error"]), tool_name=self.name)
        return str(answer["result"])
