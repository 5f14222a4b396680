"""The layer contracts hold on the real tree and bite on a tree that breaks them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(project / "importlinter.ini"), "--no-cache"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_real_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        (
            "core_agent/kernel/state_machine.py",
            "import litellm",
            "Kernel forbids infrastructure libraries",
        ),
        (
            "core_agent/orchestration/react_executor.py",
            "import providers.litellm_gateway",
            "Package layers",
        ),
        (
            "core_agent/tooling/registry.py",
            "import core_agent.orchestration.react_executor",
            "Kernel layers",
        ),
        (
            "core_agent/prompts/prompt_set.py",
            "import core_agent.memory.conversation_compaction",
            "Kernel layers",
        ),
        (
            "providers/sqlite/task_store.py",
            "import core_agent.kernel.agent_kernel",
            "Adapters use kernel contracts only",
        ),
        (
            "business_adapters/reader/tools.py",
            "import core_agent.tooling.function_tool",
            "Adapters use kernel contracts only",
        ),
        (
            "business_adapters/reader/capability.py",
            "import core_agent.prompts",
            "Adapters use kernel contracts only",
        ),
        (
            "business_adapters/coding_assistant/glob_tool.py",
            "import providers.builtin_tools.files",
            "Adapters are independent",
        ),
    ],
)
def test_a_violating_import_in_a_copy_fails_the_check(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    project = tmp_path / "project"
    shutil.copytree(
        ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    shutil.copy(ROOT / "importlinter.ini", project / "importlinter.ini")
    target = project / "src" / module
    target.write_text(target.read_text() + f"\n{bad_import}  # deliberate violation\n")

    result = lint_imports(project)

    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert f"{contract} BROKEN" in broken, result.stdout
