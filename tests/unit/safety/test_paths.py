"""Workspace confinement: ``..``, symlinks, look-alike prefixes and protected paths."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core_agent.contracts.errors import SandboxRefusedError
from core_agent.contracts.tool import Capability
from providers.sandbox.paths import PathGuard

R, W = Capability.READ, Capability.WRITE


@pytest.fixture
def layout(tmp_path: Path):
    ws = tmp_path / "ws"
    evil = tmp_path / "ws-evil"
    data = tmp_path / "agent-data"
    for folder in (ws / "src", evil, ws / ".git" / "hooks"):
        folder.mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (evil / "secret.txt").write_text("top secret\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    (ws / "link-out").symlink_to(tmp_path / "outside.txt")
    (ws / "dir-out").symlink_to(evil)
    (ws / "link-in").symlink_to(ws / "src" / "app.py")
    return ws, evil, data, PathGuard([ws], [data])


@pytest.mark.parametrize(
    "path",
    [
        "../outside.txt",
        "src/../../outside.txt",
        "link-out",
        "dir-out/secret.txt",
        "/etc/passwd",
        "{evil}/secret.txt",
        "{ws}-evil/secret.txt",
        "{ws}/../ws-evil/secret.txt",
    ],
)
def test_escapes_are_refused_for_reading(layout, path: str) -> None:
    ws, evil, _, guard = layout
    path = path.format(ws=ws, evil=evil)
    assert not guard.check(path, R).allowed
    with pytest.raises(SandboxRefusedError):
        guard.read(path, 100)


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".git/hooks/post-checkout",
        "src/../.git/HEAD",
        ".GIT/x",
        "{data}/core_agent.db",
        "{data}/not-yet/created.txt",
        "link-out",
        "dir-out/new.txt",
    ],
)
def test_protected_and_escaping_writes_are_refused(layout, path: str) -> None:
    _, _, data, guard = layout
    path = path.format(data=data)
    assert not guard.check(path, W).allowed
    with pytest.raises(SandboxRefusedError):
        guard.write(path, b"x")
    assert not (data / "not-yet").exists()


def test_inside_the_root_reads_and_writes_work(layout) -> None:
    ws, _, _, guard = layout
    assert guard.read("src/app.py", 100) == (b"print('hi')\n", False)
    assert guard.read("link-in", 100)[0] == b"print('hi')\n"  # a symlink that stays inside
    assert guard.read("src/app.py", 5) == (b"print", True)
    guard.write("src/new.py", b"x = 1\n")
    assert (ws / "src" / "new.py").read_text() == "x = 1\n"
    assert [p.name for p in guard.list_files(ws, 10)] == ["app.py", "new.py"]


def test_a_file_replaced_by_an_escaping_symlink_is_refused(layout, tmp_path) -> None:
    ws, _, _, guard = layout
    assert guard.read("src/app.py", 100)[0]
    (ws / "src" / "app.py").unlink()
    (ws / "src" / "app.py").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(SandboxRefusedError):
        guard.read("src/app.py", 100)
    with pytest.raises(SandboxRefusedError):
        guard.write("src/app.py", b"replaced")
    assert (tmp_path / "outside.txt").read_text() == "outside\n"


names = st.sampled_from(["a", "b", "c", "..", ".", "link1", "link2"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    links=st.lists(
        st.tuples(
            st.sampled_from(["link1", "a/link2", "b/link3"]),
            st.sampled_from(["../..", "..", "a", "/", "../outside", "b/c"]),
        ),
        max_size=3,
        unique_by=lambda t: t[0],
    ),
    request_path=st.lists(names, min_size=1, max_size=5),
)
def test_generated_trees_with_symlinks_never_leak_outside(tmp_path_factory, links, request_path):
    base = tmp_path_factory.mktemp("tree")
    ws = base / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "b" / "c").mkdir(parents=True)
    (base / "outside").mkdir()
    (base / "outside" / "f").write_text("secret")
    (ws / "a" / "f").write_text("ok")
    for link, target in links:
        (ws / link).symlink_to(target)
    guard = PathGuard([ws])
    candidate = "/".join(request_path)
    verdict = guard.check(candidate, R)
    real = Path(os.path.realpath(ws / candidate))
    inside = real == ws.resolve() or real.is_relative_to(ws.resolve())
    assert verdict.allowed == inside
    if verdict.allowed and real.is_file():
        assert guard.read(candidate, 10)[0] in (b"ok", b"")
