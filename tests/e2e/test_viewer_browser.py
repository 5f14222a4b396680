"""``core-agent ui`` starts the browser without putting its token on any command line.

A process's arguments are readable by every local user (``ps``), and whoever holds the token
decides approvals. ``BROWSER`` names a stand-in that records what it was given, as xdg-open
or a browser would get it; no display is set, so no real browser is tried after it.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

CLI = Path(sys.executable).with_name("core-agent")
WAIT_S = 60  # generous: the suite runs beside other work on two cores


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _stand_in(tmp_path: Path, *, then: str = "exit 0") -> tuple[Path, Path]:
    """A browser that writes its pid, arguments and environment to a record file, then ``then``."""
    record = tmp_path / "record"
    script = tmp_path / "browser.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"{{ echo \"PID $$\"; printf 'ARG %s\\n' \"$@\"; env; }} > '{record}.part'\n"
        f"mv '{record}.part' '{record}'\n"
        f"{then}\n"
    )
    script.chmod(0o755)
    return script, record


def _environment(data_dir: Path, browser: Path) -> dict[str, str]:
    drop = ("AGENT_", "DISPLAY", "WAYLAND_DISPLAY")
    base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**base, "AGENT_DATA_DIR": str(data_dir), "BROWSER": str(browser)}


@dataclass
class Viewer:
    process: subprocess.Popen[str]
    url: str = ""
    stderr: str = ""
    """What it wrote on stderr, once it has stopped."""


@contextmanager
def _viewer(env: dict[str, str], *args: str) -> Iterator[Viewer]:
    """The viewer's process and the URL it printed; stopped (SIGTERM) on the way out."""
    with subprocess.Popen(
        [str(CLI), "ui", "--port", "0", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        viewer = Viewer(process)
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], WAIT_S)
            assert ready, "the viewer printed no URL"
            viewer.url = process.stdout.readline().strip()
            assert "token=" in viewer.url, viewer.url
            yield viewer
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                viewer.stderr = process.communicate(timeout=WAIT_S)[1]
            except subprocess.TimeoutExpired:
                process.kill()  # or leaving the block would wait for it without end
                raise


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_the_browser_gets_a_private_page_that_redirects_and_never_the_token(
    tmp_path: Path,
) -> None:
    browser, record = _stand_in(tmp_path)
    data_dir = tmp_path / "data"
    with _viewer(_environment(data_dir, browser)) as viewer:
        url, process = viewer.url, viewer.process
        token = url.split("token=", 1)[1]
        _wait_for(record)
        recorded = record.read_text()
        assert token not in recorded  # neither in its arguments nor in its environment
        arguments = [line[4:] for line in recorded.splitlines() if line.startswith("ARG ")]
        assert len(arguments) == 1 and arguments[0].startswith("file://"), arguments
        page = Path(unquote(urlsplit(arguments[0]).path))
        assert page.is_relative_to(data_dir / "runtime")
        assert _mode(page) == 0o600
        assert _mode(page.parent) == 0o700
        assert _mode(data_dir / "runtime") == 0o700
        assert f'<meta http-equiv="refresh" content="0;url={url}">' in page.read_text()
        assert process.poll() is None
    assert process.returncode == 0, viewer.stderr
    assert not page.exists()
    assert not page.parent.exists()  # its folder goes too
    assert list((data_dir / "runtime").iterdir()) == []


def test_with_no_open_nothing_is_written_and_no_browser_starts(tmp_path: Path) -> None:
    browser, record = _stand_in(tmp_path)
    data_dir = tmp_path / "data"
    with _viewer(_environment(data_dir, browser), "--no-open") as viewer:
        process = viewer.process
        assert process.poll() is None
    assert process.returncode == 0, viewer.stderr
    assert not (data_dir / "runtime").exists()
    assert not record.exists()


def test_a_browser_that_cannot_start_leaves_no_page_and_the_viewer_serving(
    tmp_path: Path,
) -> None:
    browser, record = _stand_in(tmp_path, then="exit 1")
    data_dir = tmp_path / "data"
    with _viewer(_environment(data_dir, browser)) as viewer:
        process = viewer.process
        _wait_for(record)
        runtime = data_dir / "runtime"
        deadline = time.monotonic() + WAIT_S
        while list(runtime.iterdir()):  # removed once the browser is seen to fail
            assert time.monotonic() < deadline, list(runtime.iterdir())
            time.sleep(0.05)
        assert process.poll() is None
    assert process.returncode == 0
    assert "open the URL above yourself" in viewer.stderr


def test_a_page_that_cannot_be_written_starts_no_browser_and_the_viewer_serves(
    tmp_path: Path,
) -> None:
    browser, record = _stand_in(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "runtime").write_text("in the way")
    with _viewer(_environment(data_dir, browser)) as viewer:
        process = viewer.process
        assert process.poll() is None
    assert process.returncode == 0
    assert "open the URL above yourself" in viewer.stderr
    assert not record.exists()


def test_the_viewer_stops_and_removes_the_page_while_the_browser_still_runs(
    tmp_path: Path,
) -> None:
    # Started from BROWSER, a browser is waited for until it exits; the viewer does not wait.
    # (Its output goes elsewhere, not to the pipes this test reads to their end.)
    browser, record = _stand_in(tmp_path, then="exec sleep 600 >/dev/null 2>&1")
    data_dir = tmp_path / "data"
    pid = None
    try:
        with _viewer(_environment(data_dir, browser)) as viewer:
            _wait_for(record)
            pid = int(record.read_text().splitlines()[0].removeprefix("PID "))
        assert viewer.process.returncode == 0, viewer.stderr
        os.kill(pid, 0)  # still running
        assert list((data_dir / "runtime").iterdir()) == []
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
