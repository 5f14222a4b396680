"""Folders and files the kernel creates are its user's alone; what exists keeps its mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from business_adapters.reader.library import ReaderLibrary
from core_agent.contracts.private_files import create_private_file, make_private_folder


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_every_missing_folder_is_made_private_and_existing_ones_are_left(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    make_private_folder(tmp_path / "a" / "b" / "c")
    assert [_mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    assert _mode(tmp_path) == 0o755
    make_private_folder(tmp_path / "a")  # there already: nothing to do
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):  # a file in the way
        make_private_folder(tmp_path / "file" / "below")


def test_a_private_file_is_new_and_never_made_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    create_private_file(tmp_path / "new", b"secret")
    assert (tmp_path / "new").read_bytes() == b"secret"
    assert _mode(tmp_path / "new") == 0o600
    with pytest.raises(FileExistsError):
        create_private_file(tmp_path / "new", b"other")
    assert (tmp_path / "new").read_bytes() == b"secret"
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(FileExistsError):
        create_private_file(tmp_path / "link")
    assert not target.exists()


def test_the_reader_library_is_its_users_alone(tmp_path: Path) -> None:
    library = ReaderLibrary(tmp_path / "data" / "reader" / "library.db")
    assert library.reading_now() is None  # opens (creates) it
    library.close()
    assert _mode(tmp_path / "data") == 0o700
    assert _mode(tmp_path / "data" / "reader") == 0o700
    assert _mode(tmp_path / "data" / "reader" / "library.db") == 0o600
