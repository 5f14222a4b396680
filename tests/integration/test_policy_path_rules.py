"""Policy path rules hold for the files a call really touches, whatever tool or spelling.

Graded through the kernel's own tools, a real workspace sandbox and the shipped rules plus a
user's deny rule (the README's "private folder" example), as `core-agent policy check` does.
"""

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.settings import DEFAULT_ALLOWED_COMMANDS
from core_agent.kernel.call_check import check_call
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import (
    ChatMessage,
    TaskRequest,
    TaskStatus,
    ToolCompleted,
    ToolMessage,
    UserMessage,
)

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
        ("run_command", {"command": "git show 'HEAD@{tomorrow 00:00}:.env'"}),
        ("run_command", {"command": "git show 'HEAD^{/:x}:.env'"}),
        ("run_command", {"command": "git rev-parse HEAD:.env"}),
        ("run_command", {"command": "git show -U HEAD:.env -- src"}),  # -U takes no next word
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


@pytest.mark.parametrize("namespaces", ["auto", "off"], ids=["namespaces", "landlock-only"])
async def test_a_command_that_walks_the_workspace_cannot_read_what_the_rules_keep_from_it(
    workspace: Path, namespaces: str
) -> None:
    # grep -r over "." (or no directory at all: grep -r reads ".") is graded low by its
    # directory and runs without a human; .env (a secret) and private/ (denied) must not come
    # with it, however it reaches them: through a link (-R follows links) or a symlinked file.
    (workspace / "docs" / "plan.md").write_text("TOKEN in the plan")
    policy = workspace.parent / "policy.toml"
    policy.write_text(PRIVATE_FOLDER)
    commands = ["grep -r 'diary\\|TOKEN' .", "grep -rn TOKEN", "grep -R TOKEN docs"]
    results = await run_commands(
        workspace, commands, policy_file=policy, sandbox_namespaces=namespaces
    )  # no human was asked
    said = [result.content for result in results]
    assert len(said) == 3
    for output in said:
        assert "plan.md:" in output and "TOKEN in the plan" in output, output
        assert "TOKEN=x" not in output and "my diary" not in output, output
        assert "name them alone: .env" in output, output
    assert "1 files left out: a policy rule denies them" in said[0]


async def test_unconfined_a_walk_past_a_ruled_file_is_refused_as_it_cannot_be_hidden(
    workspace: Path,
) -> None:
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "data_dir": workspace.parent / "data",
                "workspace_roots": (workspace,),
                "sandbox_mode": "unconfined",
            }
        )
    )
    calls = [
        ScriptedToolCall(name="run_command", arguments={"command": "grep -r TOKEN ."}),
        ScriptedToolCall(name="run_command", arguments={"command": "grep -r hello docs"}),
    ]
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [ScriptedTurn(tool_calls=[call]) for call in calls] + [ScriptedTurn(content="done")]
        )
    )
    (workspace / "docs" / "env").unlink()  # docs/ holds nothing a rule concerns now
    (workspace / "docs" / "hello.md").write_text("hello")
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="look around", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    done = [e.result for e in events if isinstance(e, ToolCompleted)]
    assert done[0].is_error and "cannot be hidden" in done[0].content, done[0]
    assert "TOKEN=x" not in done[0].content
    assert not done[1].is_error and "docs/hello.md:hello" in done[1].content, done[1]


def test_a_walk_past_too_many_withheld_files_is_refused_with_the_reason(
    workspace: Path, tmp_path: Path
) -> None:
    from core_agent.contracts.tool import WithheldFile
    from providers.sandbox.paths import PathGuard
    from providers.sandbox.walk_screen import screen_walks

    def secret(path: str) -> WithheldFile | None:
        return WithheldFile(denied=True, reason="x") if "private" in path or "env" in path else None

    paths, walks = PathGuard([workspace]), [str(workspace)]
    screen = screen_walks(paths, walks, secret)
    assert screen.refusal is None and screen.denied == 2  # .env, private/notes.txt, once each
    assert screen_walks(paths, walks, secret, max_hidden=1).refusal is not None
    assert "more than 3 files" in (screen_walks(paths, walks, secret, max_files=3).refusal or "")


async def run_commands(workspace: Path, commands: list[str], **settings: Any) -> list[Any]:
    """Each command run by a scripted model in its own turn; the tool results in order."""
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": workspace.parent / "data", "workspace_roots": (workspace,)}
            | settings
        )
    )
    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="run_command", arguments={"command": c})])
        for c in commands
    ]
    container.llm_gateway.override(ScriptedLLMGateway([*turns, ScriptedTurn(content="done")]))
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="look around", force_mode="react"))
        events = await kernel.task_events(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED  # no human was asked
    return [e.result for e in events if isinstance(e, ToolCompleted)]


async def test_a_walk_reaching_a_secret_by_another_root_link_or_name_does_not_read_it(
    workspace: Path, tmp_path: Path
) -> None:
    # Another root (walked by its absolute path), a link out of the roots to a readable
    # folder (grep -R follows it), a hard link (a second name of .env), an allowlist entry
    # with words of its own (grep -n): each walked past a secret, none may read it.
    other = tmp_path / "other"
    other.mkdir()
    (other / ".env").write_text("TOKEN=other")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "server.pem").write_text("TOKEN=pem")
    (workspace / "ext").symlink_to(extra)
    os.link(workspace / ".env", workspace / "notes.bak")
    results = await run_commands(
        workspace,
        # The configured entry first: it may write, so after a tainting read it would ask.
        ["grep -n -r TOKEN", f"grep -r TOKEN {other}", "grep -R TOKEN .", "grep -r TOKEN ."],
        workspace_roots=(workspace, other),
        sandbox_read_paths=(extra,),
        sandbox_allowed_commands=(*DEFAULT_ALLOWED_COMMANDS, "grep -n"),
    )
    assert len(results) == 4
    for result in results:
        assert not result.is_error, result
        assert "TOKEN=" not in result.content, result.content
    assert "name them alone: .env" in results[1].content  # other's, by its own root
    assert "notes.bak" in results[3].content and "server.pem" in results[2].content


async def test_a_withheld_file_whose_name_is_not_utf8_refuses_the_walk_plainly(
    workspace: Path,
) -> None:
    os.rename(workspace / ".env", os.path.join(os.fsencode(workspace), b"k\xfe.pem"))
    (result,) = await run_commands(workspace, ["grep -r TOKEN ."])
    assert result.is_error and "not UTF-8" in result.content, result
    assert "TOKEN=x" not in result.content


def git(workspace: Path, *args: str) -> str:
    identity = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    env = {**os.environ, **identity, "GIT_COMMITTER_EMAIL": "a@b"}
    done = subprocess.run(
        ["git", *args], cwd=workspace, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


async def test_git_cannot_print_a_secret_its_history_keeps_once_deleted(tmp_path: Path) -> None:
    # A committed .env stays in the history after it is deleted: git log -p, git show and git
    # diff (allowed, read-only, no human asked) print it unless the repository is screened.
    workspace = tmp_path / "repo"
    (workspace / "src").mkdir(parents=True)
    git(workspace, "init", "-q")
    (workspace / "src" / "app.py").write_text("x = 1\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "first")
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"data_dir": tmp_path / "data", "workspace_roots": (workspace,)}
        )
    )

    def model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
        # Runs the command the task names, then answers.
        if isinstance(messages[-1], ToolMessage):
            return ScriptedTurn(content="done")
        command = [m for m in messages if isinstance(m, UserMessage)][-1].content
        call = ScriptedToolCall(name="run_command", arguments={"command": command})
        return ScriptedTurn(tool_calls=[call])

    container.llm_gateway.override(ScriptedLLMGateway(policy=model))

    async def run(kernel: Any, command: str) -> Any:
        result = await kernel.execute_task(TaskRequest(task=command, force_mode="react"))
        assert result.status is TaskStatus.SUCCEEDED  # no human was asked
        events = await kernel.task_events(result.task_id)
        (done,) = [e.result for e in events if isinstance(e, ToolCompleted)]
        return done

    async with container.kernel() as kernel:
        clean = await run(kernel, "git log -p")
        assert not clean.is_error and "x = 1" in clean.content  # nothing withheld yet
        (workspace / ".env").write_text("TOKEN=sk-secret-123456\n")
        git(workspace, "add", ".env")
        git(workspace, "commit", "-qm", "oops")
        git(workspace, "rm", "-q", ".env")
        git(workspace, "commit", "-qm", "removed")
        (workspace / "HEAD~1^!").write_text("a file named like a revision\n")
        for command in (
            "git log -p",
            "git show HEAD~1",
            "git diff HEAD~1",  # its tree holds .env
            "git diff HEAD~1^!",  # that commit against its parent
            "git diff HEAD~2...HEAD~1",  # against the merge base
            "git diff HEAD~1 -- --no-index .",  # after --, a path: not the no-index mode
            "git diff HEAD~1:src HEAD:src",  # trees, not files
            f"git diff ':{workspace}/|oops'",  # a commit found by its message
            f"git show ':{workspace}/|oops'",
            "git diff 'HEAD~1^!' -- .",  # git reads it as a revision, file or not
            "git log -S TOKEN",
            "git log -p -- '*.env'",  # a glob pathspec
            "git -C .git log -p",  # no work tree
        ):
            refused = await run(kernel, command)
            why = "without a work tree" if ".git " in command else "(.env)"
            assert refused.is_error and why in refused.content, refused
            assert "sk-secret" not in refused.content
        limited = await run(kernel, "git log -p -- src")
        assert not limited.is_error and "x = 1" in limited.content
        assert "sk-secret" not in limited.content
        names = await run(kernel, "git log --oneline")
        assert not names.is_error and "oops" in names.content
        # A diff reads the index, the work tree and the trees it names, not the history.
        (workspace / "src" / "app.py").write_text("x = 2\n")
        for command in ("git diff", "git diff HEAD~2 HEAD", "git diff --cached", "git show --stat"):
            compared = await run(kernel, command)
            assert not compared.is_error, compared
        # --stat prints a commit's names only, but a file's object whole.
        blob = git(workspace, "rev-parse", "HEAD~1:.env")
        refused = await run(kernel, f"git show --stat {blob[:10]}")
        assert refused.is_error and "sk-secret" not in refused.content, refused


async def test_git_diff_of_two_directories_is_a_walk_and_screened(workspace: Path) -> None:
    # Outside a repository (or with --no-index), git diff compares directories file by file.
    (workspace / "empty").mkdir()
    results = await run_commands(
        workspace, ["git diff --no-index empty .", "git diff --no-index . empty"]
    )
    for result in results:
        assert "TOKEN=x" not in result.content and "my diary" not in result.content, result


async def test_git_cannot_print_a_secret_only_a_reflog_or_a_merge_still_holds(
    tmp_path: Path,
) -> None:
    # A commit reset away stays in ORIG_HEAD and the reflog; a file a merge alone added and a
    # later commit removed shows only in the merge's own changes.
    workspace = tmp_path / "repo"
    workspace.mkdir()
    git(workspace, "init", "-q", "-b", "main")
    (workspace / "app.py").write_text("x = 1\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "first")
    (workspace / "server.pem").write_text("PRIVATE pem-secret\n")
    git(workspace, "add", "server.pem")
    git(workspace, "commit", "-qm", "key")
    git(workspace, "reset", "-q", "--hard", "HEAD~1")
    results = await run_commands(
        workspace,
        ["git show ORIG_HEAD", "git log -g -p", "git log --oneline", "git show HEAD:app.py"],
    )
    for refused in results[:2]:
        assert refused.is_error and "server.pem" in refused.content, refused
        assert "pem-secret" not in refused.content
    assert not results[2].is_error and not results[3].is_error and "x = 1" in results[3].content
    workspace = tmp_path / "merged"
    workspace.mkdir()
    git(workspace, "init", "-q", "-b", "main")
    (workspace / "app.py").write_text("x = 1\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "first")
    git(workspace, "checkout", "-qb", "side")
    (workspace / "side.txt").write_text("side\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "side")
    git(workspace, "checkout", "-q", "main")
    git(workspace, "merge", "-q", "--no-ff", "--no-commit", "side")
    (workspace / ".env").write_text("TOKEN=merge-secret\n")
    git(workspace, "add", ".env")
    git(workspace, "commit", "-qm", "merge")
    git(workspace, "rm", "-q", ".env")
    git(workspace, "commit", "-qm", "removed")
    (refused,) = await run_commands(workspace, ["git show HEAD~1"])
    assert refused.is_error and ".env" in refused.content and "merge-secret" not in refused.content


async def test_a_repository_above_the_workspace_is_screened_by_the_workspaces_own_paths(
    tmp_path: Path,
) -> None:
    # The workspace is a folder of a larger repository: its history names app/private/...,
    # which the workspace's rule on private/** (relative to its root) must still see.
    repository = tmp_path / "repo"
    workspace = repository / "app"
    (workspace / "private").mkdir(parents=True)
    git(repository, "init", "-q")
    (workspace / "private" / "notes.txt").write_text("my diary\n")
    (workspace / "main.py").write_text("x = 1\n")
    git(repository, "add", "-A")
    git(repository, "commit", "-qm", "first")
    git(repository, "rm", "-rq", "app/private")
    git(repository, "commit", "-qm", "removed")
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[rule]]\nname = "private-folder"\neffect = "deny"\npaths = ["private/**"]\n'
    )
    (result,) = await run_commands(workspace, ["git log -p"], policy_file=policy)
    assert result.is_error and "a policy rule denies" in result.content, result
    assert "my diary" not in result.content


async def test_a_file_of_a_commit_is_graded_by_its_name_not_where_a_link_now_leads(
    tmp_path: Path,
) -> None:
    # git show HEAD~1:.env reads .env from the commit; in the work tree .env is now a link to
    # README.md, which must not make it README.md to the policy.
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (workspace / "README.md").write_text("hello")
    (workspace / ".env").symlink_to(workspace / "README.md")
    assert await verdict(workspace, "run_command", command="git show HEAD~1:.env") == (
        "high",
        "secret-files",
    )
