"""Business capabilities from the terminal: ``ingest --capability`` and ``policy check``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from business_adapters.reader import ReaderLibrary
from e2e.test_cli import run
from support.capability_entry_points import capability_site

ARTICLE = "研究团队公布了一种新的量子纠错方案。这种方法把逻辑错误率降低了一个数量级。"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The capabilities visible to the child, and the reader's library with one article."""
    site = capability_site(tmp_path / "site")
    library = ReaderLibrary(tmp_path / "library.db")
    library.add_article("量子计算的新进展", ARTICLE)
    library.add_article("Spring gardening", "Plant tomatoes after the last frost.")
    library.close()
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        "PYTHONPATH": os.pathsep.join(paths),
        "READER_LIBRARY_PATH": str(tmp_path / "library.db"),
    }


def test_ingest_a_capability_then_search_it(tmp_path: Path, env: dict[str, str]) -> None:
    data = tmp_path / "data"
    first = run("ingest", "--capability", "reader", data_dir=data, **env)
    assert first.returncode == 0, first.stderr
    assert "2 ingested" in first.stdout
    again = run("ingest", "--capability", "reader", "--json", data_dir=data, **env)
    assert [json.loads(line)["status"] for line in again.stdout.splitlines()] == ["unchanged"] * 2

    found = run("search", "量子纠错", "--json", data_dir=data, **env)
    assert found.returncode == 0, found.stderr
    top = json.loads(found.stdout)[0]
    assert top["document_id"] == "capability:reader:article/1"
    assert top["source"] == "reader://article/1"


def test_ingest_refuses_a_path_and_a_capability_together_or_an_unknown_one(
    tmp_path: Path, env: dict[str, str]
) -> None:
    both = run("ingest", str(tmp_path), "--capability", "reader", data_dir=tmp_path, **env)
    assert both.returncode == 2 and "one of them" in both.stderr
    unknown = run("ingest", "--capability", "raeder", data_dir=tmp_path, **env)
    assert unknown.returncode == 2
    assert "raeder" in unknown.stderr and "reader" in unknown.stderr


@pytest.mark.parametrize(
    ("tool", "arguments", "rule", "outcome"),
    [
        ("run_command", {"command": "git push --force origin main"}, "no-force-push", "denied"),
        ("write_file", {"path": ".github/workflows/ci.yml", "content": "x"}, "ci-and-hooks", "ask"),
        ("save_highlight", {"article_id": 1, "quote": "x"}, "save-highlight-needs-approval", "ask"),
    ],
)
def test_policy_check_applies_a_capabilitys_rules(
    tmp_path: Path,
    env: dict[str, str],
    tool: str,
    arguments: dict[str, object],
    rule: str,
    outcome: str,
) -> None:
    enabled = {"AGENT_CAPABILITIES": "coding_assistant,reader", **env}
    args = ["--tool", tool, "--args", json.dumps(arguments), "--workspace", str(tmp_path)]
    result = run("policy", "check", *args, data_dir=tmp_path / "data", **enabled)
    assert result.returncode == (1 if outcome == "denied" else 0), result.stderr  # 1: refused
    report = json.loads(result.stdout)
    assert report["rule"].endswith(f":{rule}")
    assert report["denied"] is (outcome == "denied")
    assert report["approval_required"] is (outcome == "ask")
