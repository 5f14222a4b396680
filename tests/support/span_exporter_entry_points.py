"""The ``core_agent.span_exporters`` entry points of pyproject.toml, made visible to a test.

The venv's installed metadata may predate them, so a test declares them the way a
third-party package would appear: a ``*.dist-info`` folder on ``sys.path`` (and, for a child
process, on its ``PYTHONPATH``), with the entry points copied from pyproject.toml.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GROUP = "core_agent.span_exporters"


def span_exporter_site(root: Path) -> Path:
    """A folder holding a distribution that declares the span exporters."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dist = root / "core_agent_span_exporters_under_test-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: core-agent-span-exporters-under-test\nVersion: 0.0.0\n"
    )
    lines = "".join(
        f"{name} = {target}\n" for name, target in project["entry-points"][GROUP].items()
    )
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}")
    return root


def install_span_exporters(monkeypatch: pytest.MonkeyPatch, root: Path) -> Path:
    """Put the span exporters' distribution on ``sys.path`` for this test; returns its folder."""
    site = span_exporter_site(root)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site
