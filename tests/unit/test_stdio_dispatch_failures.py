"""Whatever fails while the stdio server handles one message is answered to that message.

The server runs in this process over two pipes, with a task store that has a bug (it raises
what no store should): the request that meets it gets -32603, and the server goes on.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.stdio_server import StdioServer
from core_agent.stdio_server.wire_json import json_bytes, lone_surrogate_at, model_json
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from shared.agent_protocol import TaskState, TaskStatus

pytestmark = pytest.mark.anyio


class BuggyTaskStore(FakeTaskStore):
    async def list_tasks(self, *, session_id=None, status=None, limit=50) -> list[TaskState]:
        raise RuntimeError("a bug in the store")


async def test_a_bug_met_by_one_request_is_answered_to_it_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data"))
    container.task_store.override(BuggyTaskStore())
    container.trace_store.override(FakeTraceStore())
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    kernel = container.kernel()
    requests_in, requests_out = os.pipe()
    answers_in, answers_out = os.pipe()
    server = StdioServer(kernel, input_fd=requests_in, output_fd=answers_out)
    os.write(
        requests_out,
        b'{"jsonrpc":"2.0","id":1,"method":"list_tasks"}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n',
    )
    os.close(requests_out)  # the end of input: the server answers, then returns
    async with kernel:
        await server.serve()
    os.close(answers_out)
    with os.fdopen(answers_in, "rb") as answers:
        by_id = {m["id"]: m for m in map(json.loads, answers)}
    os.close(requests_in)
    assert by_id[1]["error"] == {
        "code": -32603,
        "message": "a bug in the store",
        "data": {"type": "RuntimeError"},
    }
    assert by_id[2]["result"] == {}


def test_output_is_encoded_whatever_text_it_holds() -> None:
    # A file name of undecodable bytes, as os.listdir gives it, in a task's output.
    state = TaskState(
        task_id="t",
        session_id="s",
        trace_id="r",
        status=TaskStatus.SUCCEEDED,
        request={"task": "list the files"},
        output="café\udce9.txt",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        updated_at=datetime(2025, 1, 1, tzinfo=UTC),
    )
    sent = json.loads(model_json(state))
    assert sent["output"] == "café\ufffd.txt"
    assert TaskState.model_validate(sent).created_at == state.created_at
    assert json.loads(json_bytes({"\ud800": ["\udfff", 1]})) == {"\ufffd": ["\ufffd", 1]}


def test_text_that_is_not_unicode_is_found_where_it_is() -> None:
    assert lone_surrogate_at({"id": 1, "params": {"task": "好😀"}}) is None
    assert lone_surrogate_at({"params": {"a": [1, {"b": "x\ud800"}]}}) == ("params", "a", 1, "b")
    assert lone_surrogate_at({"params": {"\udc00": 1}}) == ("params", "member name '\\udc00'")
