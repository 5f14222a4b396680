"""``import core_agent`` and CLI start-up pull in no heavy or networked library."""

import subprocess
import sys

import pytest

HEAVY = ("litellm", "lancedb", "tiktoken", "openai", "sqlite_vec", "httpx")


def imported_modules(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    modules = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            modules.add(line.rsplit("|", 1)[1].strip())
    return modules


@pytest.mark.parametrize(
    "code",
    [
        "import core_agent",
        "import core_agent.cli",
        "from core_agent.cli import _parser; _parser().format_help()",
    ],
)
def test_start_up_imports_no_model_vector_or_tokenizer_library(code: str) -> None:
    modules = imported_modules(code)
    assert "core_agent" in modules
    loaded = {m for m in modules if m.split(".")[0] in HEAVY}
    assert not loaded, f"{code!r} imported {sorted(loaded)}"


def test_building_a_kernel_with_the_scripted_model_does_not_import_litellm(tmp_path) -> None:
    code = (
        "from core_agent import create_kernel, AgentSettings;"
        f"create_kernel(AgentSettings(data_dir={str(tmp_path)!r}))"
    )
    modules = imported_modules(code)
    assert not {m for m in modules if m.split(".")[0] in ("litellm", "openai", "tiktoken")}
