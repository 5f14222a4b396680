"""Tools a host passes in code: ``create_kernel(tools=..., deps=...)``.

The shipped scripted model calls the tools from a script file, so every task runs through the
real kernel, registry, policy, stores and checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core_agent import ToolContext, create_kernel, tool
from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool, ToolSpec
from shared.agent_protocol import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    TaskRequest,
    TaskStatus,
    ToolCompleted,
)

pytestmark = pytest.mark.anyio


class Notebook:
    """A host object the tools work on."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.notes: list[str] = []


@tool(capabilities={"read"}, idempotent=True)
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: The text to count.
    """
    return len(text.split())


@tool(capabilities={"write"})
def save_note(ctx: ToolContext[Notebook], text: str) -> str:
    """Save a note in the user's notebook.

    Args:
        text: What to write down.
    """
    ctx.deps.notes.append(text)
    return f"saved in {ctx.deps.owner}'s notebook ({len(ctx.deps.notes)} notes)"


@tool(capabilities={"exec"})
def send_note(ctx: ToolContext[Notebook], text: str) -> str:
    """Send a note (needs a human's approval: it acts outside).

    Args:
        text: What to send.
    """
    ctx.deps.notes.append(text)
    return f"sent from {ctx.deps.owner}'s notebook"


class Echo(ITool):
    """A tool written as a class rather than with ``@tool``."""

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="echo",
            description="Repeat a text.",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
        )

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict(arguments)

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        return f"echo: {arguments['text']}"


def scripted(tmp_path: Path, *calls: dict[str, Any], **settings: Any) -> AgentSettings:
    """Settings whose scripted model makes ``calls`` in one turn, then answers ``done``."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": list(calls)}, {"content": "done"}]))
    return AgentSettings(
        data_dir=tmp_path / "data", scripted_model_script=script, model_max_retries=0, **settings
    )


def said(event: ToolCompleted) -> list[str]:
    """The result's lines (a tool's output may be wrapped as untrusted data around them)."""
    return event.result.content.splitlines()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def results_of(kernel: Any, task: str = "go") -> dict[str, ToolCompleted]:
    events: list[AgentEvent] = []
    async with kernel:
        async for event in kernel.stream_task(TaskRequest(task=task)):
            events.append(event)
    assert events[-1].kind == "task.succeeded", events[-1]
    return {e.result.name: e for e in events if isinstance(e, ToolCompleted)}


async def test_tools_passed_in_code_run_next_to_installed_and_kernel_tools(tmp_path) -> None:
    settings = scripted(
        tmp_path,
        call("word_count", text="one two three"),
        call("echo", text="hi"),
        call("calculator", expression="6 * 7"),
        call("recall", query="anything"),
    )
    completed = await results_of(create_kernel(settings, tools=[word_count, Echo()]))
    assert {name: e.result.is_error for name, e in completed.items()} == {
        "word_count": False,
        "echo": False,
        "calculator": False,
        "recall": False,
    }
    assert "3" in said(completed["word_count"])
    assert "echo: hi" in said(completed["echo"])
    assert "42" in said(completed["calculator"])


async def test_a_selection_of_installed_tools_keeps_the_tools_passed_in_code(tmp_path) -> None:
    settings = scripted(
        tmp_path,
        call("word_count", text="a b"),
        call("calculator", expression="1 + 1"),
        call("recall", query="x"),
        tools="calculator",
    )
    completed = await results_of(create_kernel(settings, tools=[word_count]))
    assert "2" in said(completed["word_count"])
    assert not completed["calculator"].result.is_error
    assert completed["recall"].result.is_error  # not selected
    assert completed["recall"].result.error_type == "ToolNotFoundError"


async def test_the_selection_may_name_a_tool_passed_in_code(tmp_path) -> None:
    settings = scripted(tmp_path, call("word_count", text="a b c d"), tools="word_count")
    completed = await results_of(create_kernel(settings, tools=[word_count]))
    assert "4" in said(completed["word_count"])


@pytest.mark.parametrize(
    ("clashing_name", "other_origin"),
    [
        ("remember", "the kernel's own tool"),
        ("calculator", "providers.builtin_tools.calculator:CalculatorTool.from_settings"),
    ],
)
def test_a_name_taken_by_an_installed_or_kernel_tool_is_refused_naming_both(
    tmp_path, clashing_name: str, other_origin: str
) -> None:
    @tool(name=clashing_name)
    def mine(text: str) -> str:
        """My own version."""
        return text

    with pytest.raises(ConfigurationError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path), tools=[mine])
    message = str(caught.value)
    assert f"two tools are named {clashing_name!r}" in message
    assert "test_tools_in_code" in message and "mine" in message  # where the host's one is
    assert other_origin in message
    assert not (tmp_path / "core_agent.db").exists()  # refused before any store was opened


def test_two_tools_of_one_name_passed_in_code_are_refused_naming_both(tmp_path) -> None:
    @tool(name="word_count")
    def other_count(text: str) -> int:
        """Count differently."""
        return 0

    with pytest.raises(ConfigurationError, match="two tools are named 'word_count'") as caught:
        create_kernel(AgentSettings(data_dir=tmp_path), tools=[word_count, other_count])
    assert ".word_count" in str(caught.value) and "other_count" in str(caught.value)


async def test_an_installed_tool_left_out_of_the_selection_frees_its_name(tmp_path) -> None:
    @tool(name="calculator")
    def my_calculator(expression: str) -> str:
        """Work out an expression my way."""
        return "mine"

    settings = scripted(tmp_path, call("calculator", expression="1 + 1"), tools="current_time")
    completed = await results_of(create_kernel(settings, tools=[my_calculator]))
    assert "mine" in said(completed["calculator"])


def plain_function(text: str) -> str:
    return text


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        ([plain_function], "plain function 'plain_function': decorate it with @tool"),
        ([Echo], "the class 'Echo': pass an instance"),
        (["calculator"], "tools[0] (str) is not a tool"),
        ([word_count, 42], "tools[1] (int) is not a tool"),
        (word_count, "takes a list of tools, not FunctionTool"),
        ("calculator", "takes a list of tools, not str"),
    ],
)
def test_what_is_not_a_tool_is_refused_clearly(tmp_path, tools: Any, fragment: str) -> None:
    with pytest.raises(TypeError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path), tools=tools)
    assert fragment in str(caught.value)


async def test_a_tool_gets_the_hosts_deps_through_its_context(tmp_path) -> None:
    notebook = Notebook("ada")
    settings = scripted(tmp_path, call("save_note", text="buy milk"))
    completed = await results_of(create_kernel(settings, tools=[save_note], deps=notebook))
    assert notebook.notes == ["buy milk"]
    assert "saved in ada's notebook (1 notes)" in said(completed["save_note"])


def test_the_context_parameter_is_hidden_from_the_model() -> None:
    assert save_note.spec.parameters["properties"].keys() == {"text"}
    assert save_note.spec.parameters["required"] == ["text"]


@pytest.mark.parametrize(("deps", "given"), [(None, "no deps"), ("a string", "deps of type str")])
def test_deps_of_another_type_than_a_tool_asks_for_are_refused_at_start_up(
    tmp_path, deps: object, given: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path), tools=[save_note], deps=deps)
    assert "tool 'save_note' asks for deps of type Notebook" in str(caught.value)
    assert given in str(caught.value)


async def test_a_resumed_task_gets_the_deps_of_the_process_that_resumes_it(tmp_path) -> None:
    """Deps are never stored: the kernel that carries a task on hands its own to the tool."""
    settings = scripted(tmp_path, call("send_note", text="the plan"))
    first = Notebook("first-process-marker")
    async with create_kernel(settings, tools=[send_note], deps=first) as kernel:
        waiting = await kernel.execute_task(TaskRequest(task="send it"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    assert first.notes == []

    second = Notebook("second")
    async with create_kernel(settings, tools=[send_note], deps=second) as kernel:
        assert waiting.pending_approval is not None
        done = await kernel.resolve_approval(
            waiting.pending_approval,
            ApprovalDecision(request_id=waiting.pending_approval, approved=True),
        )
    assert done.status is TaskStatus.SUCCEEDED
    assert (first.notes, second.notes) == ([], ["the plan"])
    stored = b"".join(path.read_bytes() for path in (tmp_path / "data").rglob("*.db*"))
    assert b"first-process-marker" not in stored


async def test_the_approval_callback_decides_calls_of_tools_passed_in_code(tmp_path) -> None:
    asked: list[ApprovalRequest] = []

    def deny(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(request_id=request.request_id, approved=False, reason="no")

    notebook = Notebook("ada")
    settings = scripted(tmp_path, call("send_note", text="x"))
    kernel = create_kernel(settings, tools=[send_note], approval_callback=deny, deps=notebook)
    completed = await results_of(kernel)
    assert [r.tool_call.name for r in asked if r.tool_call] == ["send_note"]
    assert completed["send_note"].result.error_type == "ApprovalDeniedError"
    assert notebook.notes == []


async def test_a_process_without_the_tool_in_code_leaves_its_approval_waiting(tmp_path) -> None:
    """``core-agent resolve`` (or any kernel not given the tool) must not spend the decision."""
    from core_agent.contracts.errors import UsageError

    settings = scripted(tmp_path, call("send_note", text="the plan"))
    notebook = Notebook("app")
    async with create_kernel(settings, tools=[send_note], deps=notebook) as kernel:
        waiting = await kernel.execute_task(TaskRequest(task="send it"))
    request_id = waiting.pending_approval
    assert request_id is not None
    decision = ApprovalDecision(request_id=request_id, approved=True)

    async with create_kernel(settings) as elsewhere:
        with pytest.raises(UsageError, match="tool 'send_note', which this process does not have"):
            await elsewhere.resolve_approval(request_id, decision)
        assert [r.request_id for r in await elsewhere.pending_approvals()] == [request_id]

    async with create_kernel(settings, tools=[send_note], deps=notebook) as kernel:
        done = await kernel.resolve_approval(request_id, decision)
    assert done.status is TaskStatus.SUCCEEDED and notebook.notes == ["the plan"]
