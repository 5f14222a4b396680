"""Repeated tool calls: refused only when nothing that could change their result happened since.

A read-only, idempotent call made a second time with nothing in between is answered with the
earlier result ("loop detected"); after a write, a command, a network call or a tool not
declared idempotent, the same read runs again and returns what is there now.
"""

import json

import pytest

from core_agent import tool
from core_agent.orchestration.loop_journal import LoopCheckpoint
from core_agent.orchestration.react_loop import call_fingerprint
from core_agent.tooling.registry import ToolRegistry
from fakes.gateways import FakeRecordingGateway
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    RiskLevel,
    TaskRequest,
    TaskStatus,
    ToolCall,
)

pytestmark = pytest.mark.anyio

files: dict[str, str] = {}
runs: list[str] = []


@tool(capabilities={"read"}, idempotent=True)
def read_note(name: str) -> str:
    """Read a note."""
    runs.append(f"read {name}")
    return files.get(name, "")


@tool(capabilities={"write"}, idempotent=True)
def write_note(name: str, text: str) -> str:
    """Write a note."""
    runs.append(f"write {name}")
    files[name] = text
    return "written"


@tool(capabilities={"exec"})
def run_tests() -> str:
    """Run the test suite."""
    runs.append("tests")
    return "passed" if files.get("fix") else "1 failed"


@tool(capabilities={"network"}, idempotent=True)
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    runs.append(f"fetch {url}")
    return f"page {url}"


@tool
def bump() -> str:
    """A tool that declares nothing: it may change anything."""
    runs.append("bump")
    files["a"] = files.get("a", "") + "+"
    return "bumped"


async def approve(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(request_id=request.request_id, approved=True)


def turn(*tool_calls: tuple[str, dict], content: str | None = None) -> ScriptedTurn:
    return ScriptedTurn(
        content=content,
        tool_calls=[ScriptedToolCall(name=name, arguments=args) for name, args in tool_calls],
    )


def read(name: str) -> tuple[str, dict]:
    return ("read_note", {"name": name})


def write(name: str, text: str) -> tuple[str, dict]:
    return ("write_note", {"name": name, "text": text})


@pytest.fixture
def run(container):
    def build(*turns: ScriptedTurn, approve_all: bool = True, **settings):
        files.clear()
        files["a"] = "old"
        runs.clear()
        if settings:
            container.settings.override(container.settings().model_copy(update=settings))
        gateway = FakeRecordingGateway(ScriptedLLMGateway(list(turns)))
        tasks, checkpoints = FakeTaskStore(), FakeCheckpointStore()
        container.task_store.override(tasks)
        container.trace_store.override(FakeTraceStore())
        container.checkpoint_store.override(checkpoints)
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(
            ToolRegistry([read_note, write_note, run_tests, fetch_page, bump])
        )
        container.llm_gateway.override(gateway)
        kernel = container.kernel()
        if approve_all:  # a human who says yes at once; without one, the task suspends
            kernel.set_approval_callback(approve)
        return kernel, tasks, checkpoints

    return build


def tool_results(tasks, task_id) -> list[tuple[str, str]]:
    """``(tool, content)`` of every finished call, in order."""
    return [
        (e.result.name, e.result.content)
        for e in tasks.events[task_id]
        if e.kind == "tool.completed"
    ]


def refused(content: str) -> bool:
    return content.startswith("Error:") and "exactly these arguments" in content


async def test_read_write_read_returns_the_new_content(run) -> None:
    kernel, tasks, _ = run(
        turn(read("a")), turn(write("a", "new")), turn(read("a")), turn(content="done")
    )
    result = await kernel.execute_task(TaskRequest(task="edit a", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert tool_results(tasks, result.task_id) == [
        ("read_note", "old"),
        ("write_note", "written"),
        ("read_note", "new"),
    ]
    assert runs == ["read a", "write a", "read a"]


async def test_the_same_read_with_nothing_in_between_is_still_refused(run) -> None:
    kernel, tasks, _ = run(turn(read("a")), turn(read("b")), turn(read("a")), turn(content="done"))
    result = await kernel.execute_task(TaskRequest(task="read", force_mode="react"))
    *_, (_, third) = tool_results(tasks, result.task_id)
    assert runs == ["read a", "read b"]
    assert refused(third)
    assert "nothing that could change its result happened since" in third
    assert "old" in third  # the earlier result is handed back


async def test_running_the_tests_again_after_an_edit_runs_them(run) -> None:
    kernel, tasks, _ = run(
        turn(("run_tests", {})),
        turn(write("fix", "patched")),
        turn(("run_tests", {})),
        turn(content="fixed"),
    )
    result = await kernel.execute_task(TaskRequest(task="fix the bug", force_mode="react"))
    assert [c for n, c in tool_results(tasks, result.task_id) if n == "run_tests"] == [
        "1 failed",
        "passed",
    ]


async def test_a_command_runs_every_time_even_with_nothing_in_between(run) -> None:
    kernel, tasks, _ = run(turn(("run_tests", {})), turn(("run_tests", {})), turn(content="ok"))
    result = await kernel.execute_task(TaskRequest(task="test twice", force_mode="react"))
    assert runs == ["tests", "tests"]
    assert not any(refused(c) for _, c in tool_results(tasks, result.task_id))


@pytest.mark.parametrize(
    ("between", "ran"),
    [
        (("run_tests", {}), "tests"),
        (("fetch_page", {"url": "https://example.org"}), "fetch https://example.org"),
        (("bump", {}), "bump"),
        (("no_such_tool", {}), None),
    ],
    ids=["exec", "network", "undeclared", "unknown"],
)
async def test_anything_that_may_change_things_makes_the_next_read_run(run, between, ran) -> None:
    kernel, tasks, _ = run(turn(read("a")), turn(between), turn(read("a")), turn(content="ok"))
    result = await kernel.execute_task(TaskRequest(task="read twice", force_mode="react"))
    assert runs == ["read a", *([ran] if ran else []), "read a"]
    assert not refused(tool_results(tasks, result.task_id)[-1][1])


async def test_a_network_call_is_never_answered_from_memory(run) -> None:
    page = ("fetch_page", {"url": "https://example.org/news"})
    kernel, _, _ = run(turn(page), turn(page), turn(content="ok"))
    await kernel.execute_task(TaskRequest(task="news", force_mode="react"))
    assert runs == ["fetch https://example.org/news"] * 2


async def test_a_read_in_the_same_turn_as_a_write_runs_and_is_not_remembered(run) -> None:
    # The calls of a turn run concurrently: the read may see the file before or after the
    # write, so it is neither answered from memory nor trusted afterwards.
    kernel, tasks, _ = run(
        turn(read("a")),
        turn(write("a", "new"), read("a")),
        turn(read("a")),
        turn(content="ok"),
    )
    result = await kernel.execute_task(TaskRequest(task="edit", force_mode="react"))
    assert runs.count("read a") == 3
    assert tool_results(tasks, result.task_id)[-1] == ("read_note", "new")


async def test_the_same_read_twice_in_one_turn_runs_once(run) -> None:
    kernel, tasks, _ = run(turn(read("a"), read("a")), turn(content="ok"))
    result = await kernel.execute_task(TaskRequest(task="read", force_mode="react"))
    assert runs == ["read a"]
    by_call = {
        e.result.call_id: e.result.content
        for e in tasks.events[result.task_id]
        if e.kind == "tool.completed"
    }
    first, second = by_call["call_1_1"], by_call["call_1_2"]
    assert first == "old"
    assert "twice in this turn" in second
    assert "call_1_1" in second  # the call whose result to use


async def test_a_failed_read_may_be_tried_again(run) -> None:
    kernel, tasks, _ = run(
        turn(("read_note", {"name": 7})), turn(("read_note", {"name": 7})), turn(content="ok")
    )
    result = await kernel.execute_task(TaskRequest(task="read", force_mode="react"))
    contents = [c for _, c in tool_results(tasks, result.task_id)]
    assert len(contents) == 2
    assert not any(refused(c) for c in contents)


async def test_what_was_remembered_survives_a_suspension(run) -> None:
    # Every call waits for a human here, so the loop is restored from its checkpoint twice.
    kernel, tasks, _ = run(
        turn(read("a")),
        turn(read("b")),
        turn(read("a")),
        turn(content="ok"),
        approve_all=False,
        policy_approval_required_risk=RiskLevel.LOW,
    )
    outcome = await kernel.execute_task(TaskRequest(task="read", force_mode="react"))
    while outcome.status is TaskStatus.WAITING_APPROVAL:
        outcome = await kernel.resolve_approval(
            outcome.pending_approval,
            ApprovalDecision(request_id=outcome.pending_approval, approved=True),
        )
    assert outcome.status is TaskStatus.SUCCEEDED, outcome.error
    assert runs == ["read a", "read b"]
    assert refused(tool_results(tasks, outcome.task_id)[-1][1])


async def test_a_task_suspended_by_the_previous_version_resumes_without_stale_results(
    run,
) -> None:
    kernel, tasks, checkpoints = run(
        turn(read("a")),
        turn(write("a", "new")),
        turn(read("c")),
        turn(read("a")),
        turn(content="ok"),
        approve_all=False,
        policy_approval_required_risk=RiskLevel.LOW,
    )
    outcome = await kernel.execute_task(TaskRequest(task="edit", force_mode="react"))
    while outcome.status is TaskStatus.WAITING_APPROVAL:
        (pending,) = await kernel.pending_approvals()
        if pending.tool_call.arguments == {"name": "c"}:
            # Rewrite the checkpoint as version 1 kept it: every call remembered, with the
            # read of "a" from before the write.
            ((_, stored),) = [
                (k, v) for (t, k), v in checkpoints.saved.items() if t == outcome.task_id
            ]
            stale = ToolCall(id="x", name="read_note", arguments={"name": "a"})
            stored.update(version=1, fingerprints={call_fingerprint(stale): "old"})
        outcome = await kernel.resolve_approval(
            outcome.pending_approval,
            ApprovalDecision(request_id=outcome.pending_approval, approved=True),
        )
    assert outcome.status is TaskStatus.SUCCEEDED, outcome.error
    assert tool_results(tasks, outcome.task_id)[-1] == ("read_note", "new")


def test_a_version_1_checkpoint_loads_without_its_fingerprints() -> None:
    stored = {
        "kind": "react_loop",
        "version": 1,
        "phase": "model",
        "run_id": "r1",
        "message_count": 4,
        "turns": 1,
        "fingerprints": {"f" * 64: "old result"},
        "error_streak": 0,
        "corrections_left": 1,
    }
    checkpoint = LoopCheckpoint.model_validate_json(json.dumps(stored))
    assert checkpoint.version == 2
    assert checkpoint.fingerprints == {}
    assert (checkpoint.run_id, checkpoint.turns, checkpoint.message_count) == ("r1", 1, 4)
    assert json.loads(checkpoint.model_dump_json())["version"] == 2
