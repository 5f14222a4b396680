"""Policy path rules hold for the files a call really touches, whatever tool or spelling.

Graded through the kernel's own tools, a real workspace sandbox and the shipped rules plus a
user's deny rule (the README's "private folder" example), as `core-agent policy check` does.
"""

from pathlib import Path
from typing import Any

import pytest

from core_agent.container import KernelContainer
from core_agent.kernel.call_check import check_call
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus, ToolCompleted

pytestmark = pytest.mark.anyio

PRIVATE_FOLDER = """
[[rule]]
name = "private-folder"
effect = "deny"
paths = ["**/private/**"]
reason = "the private folder stays closed to this agent"

[[rule]]
name = "docs-are-drafts"
tools = ["write_file"]
paths = ["docs/**"]
risk = "low"
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "private").mkdir(parents=True)
    (root / "private" / "notes.txt").write_text("my diary")
    (root / ".env").write_text("TOKEN=x")
    (root / "README.md").write_text("hello")
    (root / "docs").mkdir()
    (root / "docs" / "env").symlink_to(root / ".env")
    (root / "shortcut").symlink_to(root / "private")
    (root / "settings.txt").symlink_to(root / ".env")
    return root


async def verdict(workspace: Path, tool: str, **arguments: Any) -> tuple[str, str]:
    """(``denied`` or the risk, the rule) of one call."""
    policy = workspace.parent / "policy.toml"
    policy.write_text(PRIVATE_FOLDER)
    container = KernelContainer()
    settings = container.settings().model_copy(
        update={
            "data_dir": workspace.parent / "data",
            "workspace_roots": (workspace,),
            "policy_file": policy,
        }
    )
    container.settings.override(settings)
    sandbox = container.sandbox()
    try:
        report = await check_call(
            tools=container.tool_registry(),
            policy=container.policy_engine(),
            sandbox=sandbox,
            threshold=settings.policy_approval_required_risk,
            tool=tool,
            arguments=arguments,
        )
    finally:
        await sandbox.close()
    return ("denied" if report["denied"] else report["risk"]), report["rule"]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "private/notes.txt"}),
        ("read_file", {"path": "shortcut/notes.txt"}),  # a link into the folder
        ("read_file", {"path": "./private/../private/notes.txt"}),
        ("run_command", {"command": "cat private/notes.txt"}),
        ("run_command", {"command": "head -n 1 README.md shortcut/notes.txt"}),
        ("run_command", {"command": "grep -r diary private"}),
        ("run_command", {"command": "cat priv*/notes.txt"}),  # what the shell expands to
        ("run_command", {"command": "git show HEAD:private/notes.txt"}),
        ("run_command", {"command": "git diff --no-index README.md private"}),
        ("run_command", {"command": "git log -p -- private"}),
        ("grep", {"pattern": "diary", "directory": "private"}),
        ("grep", {"pattern": "diary", "directory": "shortcut"}),
        ("list_files", {"directory": "private"}),
    ],
)
async def test_a_deny_rule_on_a_folder_holds_for_every_tool_and_spelling(
    workspace: Path, tool: str, arguments: dict[str, Any]
) -> None:
    assert await verdict(workspace, tool, **arguments) == ("denied", "private-folder")


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": ".env"}),
        ("read_file", {"path": ".env/."}),
        ("read_file", {"path": "./.env/"}),
        ("read_file", {"path": "settings.txt"}),  # a link to it
        ("run_command", {"command": "cat .env"}),
        ("run_command", {"command": "cat README.md .env"}),  # graded by its riskiest file
        ("run_command", {"command": "wc -c < settings.txt"}),
        ("run_command", {"command": "cat .en?"}),
        ("run_command", {"command": "head .en[v] README.md"}),
        ("run_command", {"command": "git show HEAD:.env"}),
        ("run_command", {"command": "git show :0:.env"}),
        ("run_command", {"command": "git diff --no-index README.md .env"}),
        ("run_command", {"command": "git log --format=%H -L1,1:.env"}),
        # A user's rule lowering writes to docs/ does not reach the file a link there leads to.
        ("write_file", {"path": "docs/env", "content": "TOKEN=y"}),
    ],
)
async def test_a_secret_file_is_graded_as_one_however_it_is_reached(
    workspace: Path, tool: str, arguments: dict[str, Any]
) -> None:
    assert await verdict(workspace, tool, **arguments) == ("high", "secret-files")


async def test_what_no_path_rule_concerns_keeps_its_grade(workspace: Path) -> None:
    assert await verdict(workspace, "read_file", path="README.md") == (
        "low",
        "default:capabilities(read)",
    )
    assert await verdict(workspace, "run_command", command="cat README.md") == (
        "low",
        "tool-check:run_command",
    )
    assert await verdict(workspace, "write_file", path="docs/plan.md", content="x") == (
        "low",
        "docs-are-drafts",
    )


async def test_a_walk_over_the_workspace_skips_what_the_rules_keep_from_it(
    workspace: Path,
) -> None:
    # grep and list_files over "." are graded low by their directory; the files below that a
    # rule denies (private/) or would ask about (.env) must not come with them.
    (workspace / "docs" / "plan.md").write_text("TOKEN in the plan")
    policy = workspace.parent / "policy.toml"
    policy.write_text(PRIVATE_FOLDER)
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": workspace.parent / "data",
                "workspace_roots": (workspace,),
                "policy_file": policy,
            }
        )
    )
    calls = [
        ScriptedToolCall(name="grep", arguments={"pattern": "diary|TOKEN", "directory": "."}),
        ScriptedToolCall(name="list_files", arguments={"directory": "."}),
    ]
    container.llm_gateway.override(
        ScriptedLLMGateway([ScriptedTurn(tool_calls=calls), ScriptedTurn(content="done")])
    )
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="look around", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED
    said = {e.result.name: e.result.content for e in events if isinstance(e, ToolCompleted)}
    assert "docs/plan.md:1:TOKEN in the plan" in said["grep"]
    assert "my diary" not in said["grep"] and "TOKEN=x" not in said["grep"]
    assert "private/notes.txt" not in said["list_files"] and "README.md" in said["list_files"]
    for name in ("grep", "list_files"):
        assert "name them alone: .env" in said[name]
        assert "1 files left out: a policy rule denies them" in said[name]


async def test_a_search_for_text_that_looks_like_a_ruled_path_is_not_denied(
    workspace: Path,
) -> None:
    # grep's "pattern" is a regular expression: searching src/ for "private/" touches nothing
    # under private/ (it was denied, as if the pattern were a path).
    (workspace / "src").mkdir()
    assert await verdict(workspace, "grep", pattern="private/", directory="src") == (
        "low",
        "default:capabilities(read)",
    )
