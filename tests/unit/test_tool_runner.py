import asyncio
import time

import anyio
import pytest

from core_agent import tool
from core_agent.contracts.tool import ToolContext
from core_agent.safety.redaction import Redactor
from core_agent.tooling.registry import ToolRegistry
from core_agent.tooling.tool_runner import ToolRunner
from shared.agent_protocol import ToolCall

pytestmark = pytest.mark.anyio
CTX = ToolContext(task_id="t", session_id="s", call_id="c")


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("disk on fire")


@tool(timeout_s=0.05)
async def slow() -> str:
    """Never finishes in time."""
    await anyio.sleep(30)
    return "late"


@pytest.fixture
def runner() -> ToolRunner:
    return ToolRunner(ToolRegistry([double, explode, slow]), default_timeout_s=5)


async def test_a_good_call_returns_the_output(runner: ToolRunner) -> None:
    result = await runner.run(ToolCall(id="1", name="double", arguments={"x": 21}), CTX)
    assert (result.content, result.is_error) == ("42", False)


@pytest.mark.parametrize(
    ("call", "error_type", "fragment"),
    [
        (
            ToolCall(id="1", name="triple", arguments={}),
            "ToolNotFoundError",
            "available tools: double, explode, slow",
        ),
        (
            ToolCall(id="1", name="double", raw_arguments='{"x": 2'),
            "ToolArgumentsError",
            "must be a JSON object",
        ),
        (
            ToolCall(id="1", name="double", arguments={"x": "two"}),
            "ToolArgumentsError",
            "x: Input should be a valid integer",
        ),
        (
            ToolCall(id="1", name="explode", arguments={}),
            "ToolExecutionError",
            "RuntimeError: disk on fire",
        ),
        (
            ToolCall(id="1", name="slow", arguments={}),
            "ToolTimeoutError",
            "did not finish within 0.05 s",
        ),
    ],
)
async def test_every_failure_becomes_an_error_result_for_the_model(
    runner: ToolRunner, call: ToolCall, error_type: str, fragment: str
) -> None:
    result = await runner.run(call, CTX)
    assert result.is_error
    assert result.error_type == error_type
    assert fragment in result.content
    assert result.call_id == "1"


async def test_tools_outside_the_allowed_set_are_unknown(runner: ToolRunner) -> None:
    result = await runner.run(
        ToolCall(id="1", name="explode", arguments={}), CTX, allowed=["double"]
    )
    assert result.error_type == "ToolNotFoundError"
    assert "available tools: double" in result.content


class _Custom(BaseException):
    """A library's own BaseException."""


@pytest.mark.parametrize(
    "raised", [SystemExit(3), _Custom("custom"), GeneratorExit()], ids=lambda e: type(e).__name__
)
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_a_tool_raising_a_base_exception_is_its_failure_not_the_hosts(
    raised: BaseException, sync: bool
) -> None:
    # sys.exit() in a script turned into a tool must not end the host's process, nor pass
    # for a cancel of the task; nor a GeneratorExit the tool raised (anyio cancels otherwise).
    if sync:

        @tool
        def leaves() -> str:
            """Exits."""
            raise raised

    else:

        @tool
        async def leaves() -> str:
            """Exits."""
            raise raised

    runner = ToolRunner(ToolRegistry([leaves]), default_timeout_s=5)
    result = await runner.run(ToolCall(id="1", name="leaves", arguments={}), CTX)
    assert result.is_error and result.error_type == "ToolExecutionError"
    assert f"it raised {type(raised).__name__}" in result.content


async def _await_a_canceled_future() -> None:
    # Something else canceled what the tool awaits: not a cancel of the task.
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "with_system_exit"])
async def test_a_tool_raising_cancelled_itself_is_its_failure_not_a_cancel(grouped: bool) -> None:
    @tool
    async def awaits() -> str:
        """Awaits a future something else canceled."""
        try:
            await _await_a_canceled_future()
        except asyncio.CancelledError as own:
            if grouped:
                raise BaseExceptionGroup("the tool's own", [own, SystemExit(3)]) from None
            raise
        return "unreached"

    runner = ToolRunner(ToolRegistry([awaits]), default_timeout_s=5)
    result = await runner.run(ToolCall(id="1", name="awaits", arguments={}), CTX)
    assert result.is_error and result.error_type == "ToolExecutionError"
    raised = "BaseExceptionGroup" if grouped else "CancelledError"
    assert f"it raised {raised}" in result.content


async def test_an_asyncio_cancel_of_the_host_task_still_cancels_a_running_tool() -> None:
    # No anyio scope was canceled: the host's Task.cancel is a cancel all the same.
    entered = anyio.Event()

    @tool
    async def waits() -> str:
        """Waits."""
        entered.set()
        await anyio.sleep_forever()
        return "unreached"

    runner = ToolRunner(ToolRegistry([waits]), default_timeout_s=3600)
    running = asyncio.create_task(runner.run(ToolCall(id="1", name="waits", arguments={}), CTX))
    await entered.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_a_cancel_still_cancels_a_running_tool(runner: ToolRunner) -> None:
    with anyio.move_on_after(0.005) as scope:  # before the tool's own 0.05 s limit
        await runner.run(ToolCall(id="1", name="slow", arguments={}), CTX)
    assert scope.cancelled_caught


async def test_ctrl_c_inside_a_tool_still_stops_the_host() -> None:
    # Python raises KeyboardInterrupt in whatever code runs when Ctrl-C comes: a tool that
    # blocks the loop is where it lands, and the person meant to stop the host.
    @tool
    async def blocks() -> str:
        """Blocks."""
        raise KeyboardInterrupt

    runner = ToolRunner(ToolRegistry([blocks]), default_timeout_s=5)
    with pytest.raises(KeyboardInterrupt):
        await runner.run(ToolCall(id="1", name="blocks", arguments={}), CTX)


LATE_KEY = "hk-5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"


@tool(timeout_s=0.05)
def late_dump() -> str:
    """Ends a little after its time limit, printing a key across the 500th character."""
    time.sleep(0.2)
    return "x" * 490 + LATE_KEY + " and more"


async def test_the_head_of_a_late_outcome_in_an_error_never_ends_inside_a_secret() -> None:
    """The error (stored: event, span, ledger) shows the head of what the tool did late; a
    head cut through a key keeps a part no redaction recognises."""
    redactor = Redactor([LATE_KEY])
    plain = ToolRunner(ToolRegistry([late_dump]), default_timeout_s=5)
    aware = ToolRunner(
        ToolRegistry([late_dump]), default_timeout_s=5, secret_spans=redactor.secret_spans
    )
    call = ToolCall(id="1", name="late_dump", arguments={})
    piece = LATE_KEY[:8]
    assert piece in redactor.text((await plain.run(call, CTX)).content)  # what it is for
    shown = (await aware.run(call, CTX)).content
    assert "did not finish within 0.05 s" in shown and "x" * 490 in shown
    assert piece not in redactor.text(shown)
