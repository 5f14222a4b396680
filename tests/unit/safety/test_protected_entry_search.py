"""The remembered search for ``.git`` entries answers exactly as a full walk would.

Each test makes the incremental search (``ProtectedEntrySearch``) remember what it listed,
changes the tree the way a command could, and compares its next answer with a fresh
``find_protected`` walk. Most tests remember listings at once (``racy_margin_ns=0``) and wait
for the file system's clock to move past every time in the tree before a search (``settle``),
so the remembered listings are both used and sound; the racy margin itself has tests of its
own. Directory mtimes are often set back (as ``touch -d`` would) so that only the inode and the
ctime can tell a change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.sandbox import confinement
from providers.sandbox.confinement import (
    RACY_MARGIN_NS,
    ProtectedEntries,
    ProtectedEntrySearch,
    find_protected,
)
from support.file_times import set_back, settle


def remembering(roots: list[Path], skip: list[Path] | None = None) -> ProtectedEntrySearch:
    return ProtectedEntrySearch(roots, skip or (), racy_margin_ns=0)


def same_as_a_full_walk(
    search: ProtectedEntrySearch, roots: list[Path], skip: list[Path] | None = None
) -> ProtectedEntries:
    remembered = search.search()
    walked = find_protected(roots, skip or ())
    assert dict(remembered.found) == dict(walked.found)
    assert remembered.complete == walked.complete
    return remembered


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    for folder in ("a/b/c", "a/d", "e/f", "g"):
        (workspace / folder).mkdir(parents=True)
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / "e" / ".git").mkdir()
    (workspace / "a" / "notes.txt").write_text("notes")
    settle(workspace)
    return workspace


def test_an_unchanged_tree_is_not_listed_again(tree: Path) -> None:
    search = remembering([tree])
    first = same_as_a_full_walk(search, [tree])
    assert search.listed == 8  # ws, a, e, g, a/b, a/d, e/f, a/b/c (a .git is not searched)
    second = same_as_a_full_walk(search, [tree])
    assert search.listed == 0
    assert second == first and sorted(second.found) == [f"{tree}/.git", f"{tree}/e/.git"]


def test_a_git_added_deep_is_found_listing_only_its_directory(tree: Path) -> None:
    search = remembering([tree])
    before = search.search()
    (tree / "a" / "b" / "c" / ".git" / "hooks").mkdir(parents=True)
    after = same_as_a_full_walk(search, [tree])
    assert search.listed == 1
    assert after.added_since(before) == [f"{tree}/a/b/c/.git"]


def test_a_git_added_under_a_directory_whose_mtime_is_set_back_is_found(tree: Path) -> None:
    search = remembering([tree])
    before = search.search()
    directory = tree / "a" / "d"
    mtime = os.lstat(directory).st_mtime_ns
    (directory / ".git").mkdir()
    set_back(directory, mtime)  # only the ctime tells now
    after = same_as_a_full_walk(search, [tree])
    assert after.added_since(before) == [f"{directory}/.git"]


def test_a_directory_replaced_at_the_same_path_is_listed_again(tree: Path) -> None:
    search = remembering([tree])
    search.search()
    parent, directory = tree / "a", tree / "a" / "b"
    times = {path: os.lstat(path).st_mtime_ns for path in (parent, directory)}
    shutil.rmtree(directory)
    (directory / ".git").mkdir(parents=True)  # the freed inode is often used again
    for path, mtime in times.items():
        set_back(path, mtime)
    after = same_as_a_full_walk(search, [tree])
    assert f"{directory}/.git" in after.found and f"{directory}/c" not in str(after.found)


def test_a_subtree_moved_in_from_outside_is_searched(tree: Path) -> None:
    outside = tree.parent / "outside"
    (outside / "x" / "y" / "z" / ".git").mkdir(parents=True)
    settle(tree)
    search = remembering([tree])
    search.search()
    mtime = os.lstat(tree / "g").st_mtime_ns
    os.rename(outside / "x", tree / "g" / "x")
    set_back(tree / "g", mtime)
    after = same_as_a_full_walk(search, [tree])
    assert f"{tree}/g/x/y/z/.git" in after.found


def test_a_subtree_moved_onto_a_remembered_path_is_searched(tree: Path) -> None:
    (tree / "e" / "f" / "h" / ".git").mkdir(parents=True)
    settle(tree)
    search = remembering([tree])
    search.search()
    times = {path: os.lstat(path).st_mtime_ns for path in (tree / "a", tree / "e" / "f")}
    shutil.rmtree(tree / "a" / "b")
    os.rename(tree / "e" / "f", tree / "a" / "b")  # a/b again, and a/b/h where a/b/c was
    for path, mtime in times.items():
        if path.exists():
            set_back(path, mtime)
    after = same_as_a_full_walk(search, [tree])
    assert f"{tree}/a/b/h/.git" in after.found
    assert f"{tree}/e/f/h/.git" not in after.found


def test_a_git_replaced_by_another_shows_as_added(tree: Path) -> None:
    search = remembering([tree])
    before = search.search()
    parent = tree / "e"
    mtime = os.lstat(parent).st_mtime_ns
    os.rename(parent / ".git", tree / "g" / "old-git")
    (parent / ".git").write_text("gitdir: ../g/old-git\n")  # a worktree's pointer file
    set_back(parent, mtime)
    set_back(tree / "g", os.lstat(tree / "g").st_mtime_ns)
    after = same_as_a_full_walk(search, [tree])
    assert after.added_since(before) == [f"{parent}/.git"]
    assert after.found[f"{parent}/.git"][2] is False


def test_vanished_directories_are_forgotten_and_new_ones_searched(tree: Path) -> None:
    search = remembering([tree])
    search.search()
    shutil.rmtree(tree / "a")
    shutil.rmtree(tree / "e")
    same_as_a_full_walk(search, [tree])
    assert search.remembered == 2  # the root and g
    (tree / "a" / "b" / ".git").mkdir(parents=True)
    after = same_as_a_full_walk(search, [tree])
    assert f"{tree}/a/b/.git" in after.found


def test_links_are_not_followed_whatever_was_remembered(tree: Path) -> None:
    outside = tree.parent / "elsewhere"
    (outside / "inner" / ".git").mkdir(parents=True)
    (tree / "link").symlink_to(outside)
    settle(tree)
    search = remembering([tree])
    assert f"{tree}/link/inner/.git" not in same_as_a_full_walk(search, [tree]).found
    # A remembered directory swapped for a link to a repository, its parent's mtime set back.
    mtime = os.lstat(tree / "a").st_mtime_ns
    shutil.rmtree(tree / "a" / "d")
    (tree / "a" / "d").symlink_to(outside / "inner")
    set_back(tree / "a", mtime)
    after = same_as_a_full_walk(search, [tree])
    assert f"{tree}/a/d/.git" not in after.found
    # And back to a real directory holding one.
    (tree / "a" / "d").unlink()
    (tree / "a" / "d" / ".git").mkdir(parents=True)
    set_back(tree / "a", mtime)
    assert f"{tree}/a/d/.git" in same_as_a_full_walk(search, [tree]).found


def test_a_root_that_is_a_link_is_listed_each_time(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "root").symlink_to(real)
    settle(real)
    roots = [tmp_path / "root"]
    search = remembering(roots)
    same_as_a_full_walk(search, roots)
    (real / ".git").mkdir()
    assert f"{tmp_path}/root/.git" in same_as_a_full_walk(search, roots).found


def test_names_skips_and_dependency_directories_as_a_full_walk(tree: Path) -> None:
    for folder in ("node_modules/p/.git", "skipped/.git", "a/.GIT", "a/.Git/inner/.git"):
        (tree / folder).mkdir(parents=True)
    settle(tree)
    skip = [tree / "skipped"]
    search = remembering([tree], skip)
    first = same_as_a_full_walk(search, [tree], skip)
    assert f"{tree}/a/.GIT" in first.found and f"{tree}/a/.Git" in first.found
    assert not any("node_modules" in path or "skipped" in path for path in first.found)
    (tree / "node_modules" / "q" / ".git").mkdir(parents=True)
    (tree / "skipped" / "r" / ".git").mkdir(parents=True)
    assert same_as_a_full_walk(search, [tree], skip) == first


def test_the_directory_limit_counts_remembered_visits(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for index in range(confinement.MAX_SCANNED_DIRECTORIES - 1):  # with the root: the limit
        (workspace / f"d{index}").mkdir()
    (workspace / "d0" / ".git").mkdir()
    settle(workspace)
    search = remembering([workspace])
    assert same_as_a_full_walk(search, [workspace]).complete
    assert same_as_a_full_walk(search, [workspace]).complete and search.listed == 0
    (workspace / "d1" / "extra").mkdir()
    over = same_as_a_full_walk(search, [workspace])
    assert not over.complete and search.listed == 1
    assert not same_as_a_full_walk(search, [workspace]).complete


def _unreadable(base: Path) -> list[list[str]]:
    if os.getuid() == 0:  # root reads every directory: become nobody (all is imported)
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    workspace = base / "ws"
    (workspace / "a" / "b" / ".git").mkdir(parents=True)
    (workspace / "c" / ".git").mkdir(parents=True)
    settle(workspace)
    search = remembering([workspace])
    answers = [search.search()]
    settle(workspace)
    (workspace / "a").chmod(0)  # unreadable: neither listed nor entered
    (workspace / "c").chmod(0o300)  # not listed any more, still entered
    answers += [search.search(), find_protected([workspace])]
    settle(workspace)
    (workspace / "a").chmod(0o755)
    (workspace / "c").chmod(0o755)
    answers += [search.search(), find_protected([workspace])]
    return [sorted(answer.found) for answer in answers]


def _mounted(base: Path) -> list[list[str]]:
    # A mount changes no directory's times, only what is found at a path.
    workspace = base / "ws"
    for folder in ("e/.git", "g", "other-git", "other/.git"):
        (workspace / folder).mkdir(parents=True)
    settle(workspace)
    search = remembering([workspace])
    answers = [search.search()]
    for source, target in (("other-git", "e/.git"), ("other", "g")):
        subprocess.run(["mount", "--bind", workspace / source, workspace / target], check=True)
    answers += [search.search(), find_protected([workspace])]
    return [[f"{path} {answer.found[path]}" for path in sorted(answer.found)] for answer in answers]


_SCENARIOS = {"unreadable": _unreadable, "mounted": _mounted}


def _in_a_child(scenario: str, *wrapper: str) -> list[list[str]]:
    """A scenario run in a fresh process (as nobody, or in a mount namespace of its own)."""
    base = Path(tempfile.mkdtemp(prefix="protected-search-"))
    code = (
        "import json, sys; from pathlib import Path; "
        "from tests.unit.safety.test_protected_entry_search import _SCENARIOS; "
        "print(json.dumps(_SCENARIOS[sys.argv[1]](Path(sys.argv[2]))))"
    )
    try:
        if os.getuid() == 0:
            os.chown(base, 65534, 65534)
        done = subprocess.run(
            [*wrapper, sys.executable, "-c", code, scenario, str(base)],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        for directory, _, _ in os.walk(base):
            os.chmod(directory, 0o755)
        shutil.rmtree(base)
    assert done.returncode == 0, done.stderr
    answers: list[list[str]] = json.loads(done.stdout)
    return answers


def test_a_directory_made_unreadable_is_passed_over_as_a_full_walk_does() -> None:
    first, unreadable, walked, readable, walked_again = _in_a_child("unreadable")
    assert [path.split("/ws/", 1)[1] for path in first] == ["a/b/.git", "c/.git"]
    assert unreadable == walked == []
    assert readable == walked_again == first


def test_a_file_system_mounted_on_a_git_or_a_directory_is_seen() -> None:
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode:
        pytest.skip("no mount namespace can be made here")
    first, mounted, walked = _in_a_child("mounted", "unshare", "-m")
    assert mounted == walked != first
    assert len(mounted) == 3 and any("/g/.git" in entry for entry in mounted)


def test_a_listing_made_within_the_margin_of_a_change_is_made_again(tree: Path) -> None:
    # As shipped: the tree was made within the last two seconds.
    search = ProtectedEntrySearch([tree])
    search.search()
    assert search.listed == 8
    search.search()
    assert search.listed == 8 and search.remembered == 0
    # A directory listed in the clock tick of its making, changed at once and its mtime set
    # back: its times may well be those listed (a coarse clock, no fine-grained ctime).
    fresh = tree / "fresh"
    fresh.mkdir()
    search.search()
    mtime = os.lstat(fresh).st_mtime_ns
    (fresh / ".git").mkdir()
    set_back(fresh, mtime)
    assert f"{fresh}/.git" in same_as_a_full_walk(search, [tree]).found


def test_a_listing_made_after_the_margin_is_remembered(tree: Path) -> None:
    later = ProtectedEntrySearch([tree], clock=lambda: time.time_ns() + RACY_MARGIN_NS + 10**9)
    later.search()
    later.search()
    assert later.listed == 0
    just_within = ProtectedEntrySearch(
        [tree], clock=lambda: time.time_ns() + RACY_MARGIN_NS - 10**8
    )
    just_within.search()
    just_within.search()
    assert just_within.listed == 8


def test_concurrent_searches_agree_with_a_full_walk(tree: Path) -> None:
    search = remembering([tree])
    search.search()
    problems: list[BaseException] = []
    stop = threading.Event()

    def keep_searching() -> None:
        try:
            while not stop.is_set():
                search.search()
        except BaseException as exc:  # reported by the test
            problems.append(exc)

    searchers = [threading.Thread(target=keep_searching) for _ in range(3)]
    for searcher in searchers:
        searcher.start()
    try:
        for index in range(40):
            (tree / "g" / f"r{index}" / ".git").mkdir(parents=True)
            if index % 3 == 0:
                shutil.rmtree(tree / "g" / f"r{index}")
    finally:
        stop.set()
        for searcher in searchers:
            searcher.join()
    assert not problems
    settle(tree)
    same_as_a_full_walk(search, [tree])
    same_as_a_full_walk(search, [tree])


_NAMES = ("a", "b", "c")
_places = st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3).map("/".join)
_changes = st.lists(
    st.tuples(
        st.sampled_from(["mkdir", "git", "gitfile", "remove", "move", "link", "unlink-git"]),
        _places,
        _places,
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rounds=st.lists(_changes, min_size=1, max_size=4))
def test_any_changes_with_their_mtimes_set_back_give_a_full_walks_answer(
    tmp_path: Path, rounds: list[list[tuple[str, str, str]]]
) -> None:
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    workspace = base / "ws"
    (workspace / "a" / "b").mkdir(parents=True)
    (workspace / "c" / ".git").mkdir(parents=True)
    settle(workspace)
    search = remembering([workspace])
    same_as_a_full_walk(search, [workspace])
    for changes in rounds:
        mtimes = {
            directory: os.lstat(directory).st_mtime_ns for directory, _, _ in os.walk(workspace)
        }
        for kind, place, other in changes:
            _change(workspace, kind, workspace / place, workspace / other)
        for directory, mtime in mtimes.items():  # every directory's mtime as it was
            if os.path.isdir(directory) and not os.path.islink(directory):
                set_back(Path(directory), mtime)
        same_as_a_full_walk(search, [workspace])
        settle(workspace)


def _change(workspace: Path, kind: str, path: Path, other: Path) -> None:
    try:
        if kind == "mkdir":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "git":
            (path / ".git").mkdir(parents=True, exist_ok=True)
        elif kind == "gitfile" and path.is_dir():
            (path / ".git").write_text("gitdir: /elsewhere\n")
        elif kind == "remove" and path != workspace:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        elif kind == "move" and path.exists() and not other.is_relative_to(path):
            os.rename(path, other)
        elif kind == "link" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(other)
        elif kind == "unlink-git":
            git = path / ".git"
            shutil.rmtree(git) if git.is_dir() and not git.is_symlink() else git.unlink()
    except OSError:
        pass  # a change that does not apply here (no such path, not empty, not a directory)
