"""Folders and files the kernel creates are its user's alone; what exists keeps its mode."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from business_adapters.reader.library import ReaderLibrary
from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.private_files import create_private_file, make_private_folder
from core_agent.trace_viewer.server import write_redirect_page
from providers.sqlite.database import connect


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


# Another user's folder or file, and what others may write to, are refused; the user's own,
# open to others, is made private. Reviewer's p2: another local user made AGENT_DATA_DIR
# first (0777, an empty 0666 core_agent.db of theirs, a 0777 runtime) and read the task back.

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NEEDS_ANOTHER_USER = pytest.mark.skipif(
    not AS_ROOT,
    reason="LOUD SKIP: making a folder or file another user owns takes root (chown); the "
    "mode checks below still run",
)


def test_a_data_directory_others_may_write_to_is_refused_saying_how_to_fix_it(
    tmp_path: Path,
) -> None:
    for mode in (0o777, 0o1777, 0o703):  # a sticky bit does not make it safe
        data_dir = tmp_path / f"data-{mode:o}"
        data_dir.mkdir()
        data_dir.chmod(mode)
        with pytest.raises(ConfigurationError) as refused:
            connect(data_dir / "core_agent.db").close()
        message = str(refused.value)
        assert f"data directory {data_dir}" in message
        assert "every local user" in message and f"chmod go-w,o-rwx {data_dir}" in message
        assert not (data_dir / "core_agent.db").exists() or (
            (data_dir / "core_agent.db").stat().st_size == 0
        )
        assert _mode(data_dir) == mode  # refused, not changed behind the user's back


def test_a_database_file_others_may_write_to_or_a_link_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    database = data_dir / "core_agent.db"
    database.touch()
    database.chmod(0o666)
    with pytest.raises(ConfigurationError, match=r"database file .*core_agent.db may be written"):
        connect(database).close()
    database.unlink()
    elsewhere = tmp_path / "theirs.db"
    elsewhere.touch()
    database.symlink_to(elsewhere)
    with pytest.raises(ConfigurationError, match=r"core_agent.db is a link"):
        connect(database).close()
    assert elsewhere.stat().st_size == 0
    database.unlink()
    wal = data_dir / "core_agent.db-wal"
    wal.symlink_to(elsewhere)  # a -wal planted before the kernel opens the database
    with pytest.raises(ConfigurationError, match=r"core_agent.db-wal is a link"):
        connect(database).close()
    assert elsewhere.stat().st_size == 0


@NEEDS_ANOTHER_USER
def test_a_data_directory_runtime_or_database_of_another_user_is_refused(
    tmp_path: Path,
) -> None:
    nobody = 65534
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    os.chown(planted, nobody, nobody)
    with pytest.raises(ConfigurationError) as refused:
        connect(planted / "core_agent.db").close()
    assert f"data directory {planted} belongs to" in str(refused.value)
    assert "uid 65534" in str(refused.value) and "AGENT_DATA_DIR" in str(refused.value)

    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    database = data_dir / "core_agent.db"
    database.touch(mode=0o600)
    os.chown(database, nobody, nobody)
    with pytest.raises(ConfigurationError, match=r"database file .* belongs to"):
        connect(database).close()

    runtime = data_dir / "runtime"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, nobody, nobody)
    with pytest.raises(ConfigurationError, match=r"runtime folder .* belongs to"):
        write_redirect_page("http://127.0.0.1:1/?token=secret", runtime)
    assert list(runtime.iterdir()) == []

    # Group-writable is refused for a group shared with others (a user private group's
    # write bit, from the umask 002 of such systems, is only tightened: see below).
    shared = tmp_path / "group-shared"
    shared.mkdir()
    shared.chmod(0o770)
    os.chown(shared, -1, nobody)
    with pytest.raises(ConfigurationError, match=r"may be written by group 65534 \(mode 0770\)"):
        make_private_folder(shared)

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "their-link"
    link.symlink_to(mine)
    os.chown(link, nobody, nobody, follow_symlinks=False)
    with pytest.raises(ConfigurationError, match=r"is a link made by"):
        make_private_folder(link)


def test_a_runtime_folder_others_may_write_to_gets_no_page(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    runtime.chmod(0o777)
    with pytest.raises(ConfigurationError, match=r"runtime folder .* every local user"):
        write_redirect_page("http://127.0.0.1:1/?token=secret", runtime)
    assert list(runtime.iterdir()) == []


def test_an_earlier_versions_data_directory_is_made_private_when_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Reviewer's p3: left by a version before the kernel made things private (umask 022).
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    database = data_dir / "core_agent.db"
    sqlite3.connect(database).close()
    database.chmod(0o644)
    wal = data_dir / "core_agent.db-wal"
    wal.touch()
    wal.chmod(0o664)  # a user private group's umask 002
    lancedb = data_dir / "lancedb"
    lancedb.mkdir(mode=0o755)
    connect(database).close()
    assert _mode(data_dir) == 0o750  # the group keeps reading; others are out
    assert _mode(database) == 0o600
    assert not wal.exists() or _mode(wal) == 0o600
    assert "was open to other users (mode 0755): now 0750" in caplog.text
    make_private_folder(lancedb)
    assert _mode(lancedb) == 0o750


def test_a_folder_the_user_shares_with_their_group_for_reading_is_kept(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o750)
    make_private_folder(shared)
    assert _mode(shared) == 0o750


def test_a_write_bit_of_the_users_private_group_is_tightened_not_refused(tmp_path: Path) -> None:
    import grp
    import pwd

    if grp.getgrgid(os.getegid()).gr_name != pwd.getpwuid(os.geteuid()).pw_name:
        pytest.skip("LOUD SKIP: this user's group is not a user private group (named as them)")
    folder = tmp_path / "umask-002"
    folder.mkdir()
    folder.chmod(0o775)
    make_private_folder(folder)
    assert _mode(folder) == 0o750
