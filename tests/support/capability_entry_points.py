"""The ``core_agent.capabilities`` entry points of pyproject.toml, made visible to a test.

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
GROUP = "core_agent.capabilities"


def declared_capabilities() -> dict[str, str]:
    """The group's entry points as pyproject.toml declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return dict(project["entry-points"][GROUP])


def capability_site(root: Path, extra: dict[str, str] | None = None) -> Path:
    """A folder holding a distribution that declares the capabilities (and ``extra``)."""
    dist = root / "core_agent_capabilities_under_test-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: core-agent-capabilities-under-test\nVersion: 0.0.0\n"
    )
    entries = {**declared_capabilities(), **(extra or {})}
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}")
    return root


def install_capabilities(
    monkeypatch: pytest.MonkeyPatch, root: Path, extra: dict[str, str] | None = None
) -> Path:
    """Put the capabilities' distribution on ``sys.path`` for this test; returns its folder."""
    site = capability_site(root, extra)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site
