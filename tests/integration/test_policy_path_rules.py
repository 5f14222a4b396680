"""Policy path rules hold for the files a call really touches, whatever tool or spelling.

Graded through the kernel's own tools, a real workspace sandbox and the shipped rules plus a
user's deny rule (the README's "private folder" example), as `core-agent policy check` does.
"""

from pathlib import Path
from typing import Any

import pytest

from core_agent.container import KernelContainer
from core_agent.kernel.call_check import check_call

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
