"""The coding assistant's pack in a real workspace: installed file and command tools plus its
own glob, all through the sandbox, under its coding prompt and policy defaults."""

from collections.abc import Sequence
from pathlib import Path

import pytest

from business_adapters.coding_assistant import CodingAssistantCapability, GlobTool
from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ToolContext
from fakes.gateways import FakeRecordingGateway
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ChatMessage,
    TaskRequest,
    TaskStatus,
    ToolMessage,
    UserMessage,
)
from support.capability_entry_points import install_capabilities

pytestmark = pytest.mark.anyio
PACK = {"read_file", "write_file", "edit_file", "grep", "glob", "run_command"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src" / "app").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "setup.py").write_text("print('setup')\n")
    (root / "src" / "app" / "__init__.py").write_text("")
    (root / "src" / "app" / "greet.py").write_text('def greet():\n    return "helo"\n')
    (root / "src" / "main.py").write_text("from app.greet import greet\n")
    (root / "docs" / "index.md").write_text("# Docs\n")
    (root / "README.md").write_text("# Project\n")
    return root


@pytest.fixture
def container(monkeypatch, tmp_path: Path, workspace: Path) -> KernelContainer:
    install_capabilities(monkeypatch, tmp_path / "site")
    container = KernelContainer()
    container.settings.override(
        AgentSettings(
            data_dir=tmp_path / "data",
            workspace_roots=(workspace,),
            capabilities=("coding_assistant",),
            tools=("calculator",),  # the pack's tools come with the capability all the same
            recovery="off",
        )
    )
    return container


async def glob(container: KernelContainer, pattern: str, directory: str = ".") -> list[str]:
    tool = container.tool_registry().get("glob")
    context = ToolContext(task_id="t", session_id="s", call_id="c", sandbox=container.sandbox())
    arguments = tool.validate_arguments({"pattern": pattern, "directory": directory})
    refusal = tool.assess(arguments, context).refusal
    assert refusal is None, refusal
    return (await tool.invoke(arguments, context)).splitlines()


async def test_the_pack_is_the_installed_tools_and_glob(container: KernelContainer) -> None:
    (pack,) = container.capabilities()
    assert isinstance(pack, CodingAssistantCapability)
    assert PACK | {"calculator"} == set(container.tool_registry().names()) - {
        "knowledge_search",
        "remember",
        "recall",
        "forget",
    }
    # Not a copy: the file tools are the installed ones.
    assert type(container.tool_registry().get("read_file")).__module__.startswith("providers.")


async def test_glob_matches_like_gitignore_through_the_sandbox(container: KernelContainer) -> None:
    try:
        assert await glob(container, "**/*.py") == [
            "setup.py",
            "src/app/__init__.py",
            "src/app/greet.py",
            "src/main.py",
        ]
        assert await glob(container, "src/*.py") == ["src/main.py"]
        assert await glob(container, "*.md") == ["README.md", "docs/index.md"]
        assert await glob(container, "*.py", directory="src/app") == ["__init__.py", "greet.py"]
        assert await glob(container, "*.rs") == ["(no matching files)"]
        tool = GlobTool()
        context = ToolContext(task_id="t", session_id="s", call_id="c", sandbox=container.sandbox())
        negated = tool.validate_arguments({"pattern": "!*.py"})
        assert "cannot start with '!'" in (tool.assess(negated, context).refusal or "")
        outside = tool.validate_arguments({"pattern": "*", "directory": "/etc"})
        assert "outside the workspace" in (tool.assess(outside, context).refusal or "")
    finally:
        await container.sandbox().close()


async def test_a_coding_task_finds_reads_and_fixes_a_file_under_the_coding_prompt(
    container: KernelContainer, workspace: Path
) -> None:
    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return call("glob", pattern="src/**/greet.py")
        assert isinstance(last, ToolMessage), last
        if last.name == "glob":
            return call("read_file", path="src/app/greet.py")
        if last.name == "read_file":
            return call("edit_file", path="src/app/greet.py", old_text='"helo"', new_text='"hello"')
        if last.name == "edit_file":
            return call("run_command", command="grep -rn hello src")
        return ScriptedTurn(content=f"Fixed the typo in src/app/greet.py. {last.content}")

    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(request_id=request.request_id, approved=True)

    gateway = FakeRecordingGateway(ScriptedLLMGateway(policy=model))
    container.llm_gateway.override(gateway)
    kernel = container.kernel()
    if await container.sandbox().command_readiness() is not None:
        pytest.skip("commands cannot be confined on this machine")
    kernel.set_approval_callback(approve)
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(task="Fix the greeting typo", force_mode="react")
        )

    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert (
        workspace / "src" / "app" / "greet.py"
    ).read_text() == 'def greet():\n    return "hello"\n'
    assert 'src/app/greet.py:2:    return "hello"' in result.output
    # The edit came after untrusted file content: one level up, so a human approved it.
    assert [r.tool_call.name for r in asked if r.tool_call] == ["edit_file"]
    system = gateway.requests[0].messages[0].content
    assert "## coding_assistant\nYou are a coding assistant" in system
    assert {spec.name for spec in gateway.requests[0].tools} >= PACK


def call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])
