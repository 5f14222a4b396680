"""Log records made while a task runs carry its task, trace and span ids (AGENT_LOG_FORMAT)."""

import io
import json
import logging
from collections.abc import Iterator

import anyio
import pytest

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.observability.log_format import log_to_stderr
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio

host_log = logging.getLogger("host.tools")


@tool
async def lookup(key: str) -> str:
    """Look a key up (and say so in the host's log)."""
    await anyio.sleep(0.01)  # lets the other task's call interleave with this one
    host_log.warning("looking up %s", key)
    return {"capital_fr": "Paris", "capital_de": "Berlin"}.get(key, "unknown")


def logging_to(log_format) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = log_to_stderr(logging.INFO, log_format, stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    yield from logging_to("json")


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    yield from logging_to("text")


def kernel_for(container: KernelContainer):
    def turn(messages) -> ScriptedTurn:
        if messages[-1].kind == "tool":
            return ScriptedTurn(content="done")
        key = "capital_de" if "Germany" in messages[-1].content else "capital_fr"
        return ScriptedTurn(tool_calls=[ScriptedToolCall(name="lookup", arguments={"key": key})])

    container.tool_registry.override(ToolRegistry([lookup]))
    container.llm_gateway.override(ScriptedLLMGateway(policy=turn))
    return container.kernel()


async def test_json_lines_carry_the_ids_of_the_task_and_span_they_were_made_in(
    container, json_log
) -> None:
    kernel = kernel_for(container)
    results = {}
    async with kernel:

        async def run(country: str) -> None:
            results[country] = await kernel.execute_task(TaskRequest(task=f"Capital of {country}?"))

        async with anyio.create_task_group() as group:  # two tasks at once
            group.start_soon(run, "France")
            group.start_soon(run, "Germany")
        spans = {c: await kernel.task_spans(r.task_id) for c, r in results.items()}
        traces = {c: (await kernel.get_task(r.task_id)).trace_id for c, r in results.items()}

    records = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert all(
        set(record) >= {"time", "level", "logger", "message", "task_id", "span_id", "trace_id"}
        for record in records
    )
    for country, key in (("France", "capital_fr"), ("Germany", "capital_de")):
        assert results[country].status is TaskStatus.SUCCEEDED
        tool_span = next(s for s in spans[country] if s.kind == "tool")
        line = next(r for r in records if r["message"] == f"looking up {key}")
        assert line["level"] == "WARNING" and line["logger"] == "host.tools"
        assert line["task_id"] == results[country].task_id
        assert line["trace_id"] == traces[country]
        assert line["span_id"] == tool_span.span_id
        assert line["time"].endswith("+00:00")
        # The kernel's own record of the task's end, in the task but in no span.
        ended = next(
            r
            for r in records
            if r["message"] == "task succeeded" and r["task_id"] == results[country].task_id
        )
        assert ended["span_id"] is None and ended["logger"].startswith("core_agent.")


async def test_records_outside_a_task_have_no_task(json_log) -> None:
    logging.getLogger("host").warning("starting up")
    (record,) = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert record["message"] == "starting up"
    assert record["task_id"] is record["span_id"] is record["trace_id"] is None


async def test_an_exception_is_kept_in_its_record(json_log) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("host").exception("it failed")
    record = json.loads(json_log.getvalue())
    assert record["level"] == "ERROR" and "RuntimeError: boom" in record["exception"]


async def test_text_lines_name_the_task(container, text_log) -> None:
    kernel = kernel_for(container)
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Capital of France?"))
    line = next(x for x in text_log.getvalue().splitlines() if "looking up" in x)
    assert line == f"WARNING host.tools [task {result.task_id[:12]}]: looking up capital_fr"
