"""CPU-bound tool work never holds the event loop, and a limit or a cancel really stops it."""

from pathlib import Path

import anyio
import pytest

from core_agent.contracts.errors import ToolExecutionError, ToolTimeoutError
from core_agent.contracts.tool import ToolContext
from providers.builtin_tools.calculator import CalculatorTool
from providers.builtin_tools.files import GrepTool
from providers.sandbox.local_sandbox import LocalToolSandbox

pytestmark = pytest.mark.anyio
CONTEXT = ToolContext(task_id="t", session_id="s", call_id="c")


class Ticker:
    """Counts how often the event loop ran it while something else was going on."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await anyio.sleep(0.005)
            self.ticks += 1


def stubborn_worker(tmp_path: Path) -> Path:
    """A calculation that never ends (as one the static checks did not foresee would)."""
    worker = tmp_path / "worker.py"
    pid_file = tmp_path / "worker.pid"
    worker.write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n    time.sleep(0.01)\n"
    )
    return worker


def alive(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_the_static_check_refuses_what_cannot_be_bounded() -> None:
    tool = CalculatorTool()
    arguments = tool.validate_arguments({"expression": "round(7, -(10**7))"})
    with pytest.raises(ToolExecutionError, match="round\\(\\) to more than 1000 digits"):
        await tool.invoke(arguments, CONTEXT)
    refused = tool.assess(tool.validate_arguments({"expression": "9 ** 99999"}), CONTEXT)
    assert refused.refusal and "exponent" in refused.refusal


async def test_a_calculation_past_its_time_limit_is_killed_and_the_loop_kept_running(
    tmp_path: Path,
) -> None:
    tool = CalculatorTool(time_limit_s=0.5, worker=stubborn_worker(tmp_path))
    ticker = Ticker()
    async with anyio.create_task_group() as group:
        group.start_soon(ticker.run)
        with pytest.raises(ToolTimeoutError, match="was stopped"):
            await tool.invoke(tool.validate_arguments({"expression": "1 + 1"}), CONTEXT)
        group.cancel_scope.cancel()
    assert ticker.ticks > 20  # the loop went on while the worker computed
    assert not alive(tmp_path / "worker.pid")


async def test_cancelling_the_call_kills_the_calculation(tmp_path: Path) -> None:
    tool = CalculatorTool(time_limit_s=60, worker=stubborn_worker(tmp_path))
    with anyio.move_on_after(0.5):
        await tool.invoke(tool.validate_arguments({"expression": "1 + 1"}), CONTEXT)
    assert not alive(tmp_path / "worker.pid")


async def test_grep_with_a_backtracking_pattern_is_linear_and_off_the_loop(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text(("a" * 40 + "!\n") * 5_000)  # under the read cap
    sandbox = LocalToolSandbox(roots=[tmp_path])
    tool = GrepTool()
    ticker = Ticker()
    context = ToolContext(task_id="t", session_id="s", call_id="c", sandbox=sandbox)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(ticker.run)
            found = await tool.invoke(
                tool.validate_arguments({"pattern": "(a+)+$", "glob": "*.txt"}), context
            )
            group.cancel_scope.cancel()
    finally:
        await sandbox.close()
    assert found == "(no matches)"


async def test_grep_refuses_what_re2_cannot_run() -> None:
    tool = GrepTool()
    assessment = tool.assess(tool.validate_arguments({"pattern": "(a)\\1"}), CONTEXT)
    assert assessment.refusal and "RE2 syntax" in assessment.refusal
