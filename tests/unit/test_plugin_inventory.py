"""The plugin inventory lists broken entry points with their error instead of failing."""

from pathlib import Path

import pytest

from core_agent.container import CAPABILITIES, ENTRY_POINT_GROUPS
from core_agent.plugin_inventory import plugin_inventory


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    dist_info = site / "acme_plugins-0.3.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugins\nVersion: 0.3\n")
    (dist_info / "entry_points.txt").write_text(
        "[core_agent.embedders]\n"
        "explodes = acme_explodes:Embedder\n"
        "[core_agent.tools]\n"
        "misnamed = json:no_such_function\n"
        "works = json:dumps\n"
    )
    (site / "acme_explodes.py").write_text("raise RuntimeError('no GPU found')\n")
    monkeypatch.syspath_prepend(str(site))


def test_every_known_group_is_listed_even_when_empty() -> None:
    groups = {group.group: group for group in plugin_inventory()}
    assert CAPABILITIES in ENTRY_POINT_GROUPS
    assert set(ENTRY_POINT_GROUPS) <= set(groups)
    assert all(groups[name].read_by_kernel for name in ENTRY_POINT_GROUPS)


@pytest.mark.usefixtures("third_party")
def test_broken_entry_points_are_listed_with_their_errors() -> None:
    plugins = {
        (group.group, plugin.name): plugin
        for group in plugin_inventory()
        for plugin in group.plugins
    }
    explodes = plugins["core_agent.embedders", "explodes"]
    assert (explodes.loads, explodes.error) == (False, "RuntimeError: no GPU found")
    misnamed = plugins["core_agent.tools", "misnamed"]
    assert misnamed.loads is False
    assert misnamed.error is not None and misnamed.error.startswith("AttributeError")
    works = plugins["core_agent.tools", "works"]
    assert (works.loads, works.distribution, works.version) == (True, "acme-plugins", "0.3")
    assert plugins["core_agent.embedders", "hashing"].loads  # the shipped ones still are
