"""The desktop example (examples/desktop_qt), driven like a user would, on Qt's offscreen platform.

The window runs the real kernel (SQLite, the scripted model with the example's script, the
built-in write_file tool) through the synchronous facade. The test types, clicks and answers
the approval dialog with QTest, and waits by running Qt's event loop, as the app does.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from shared.agent_protocol import TaskEvent, TaskStatus
from support.qt_offscreen import OffscreenQtUnavailable, ensure_offscreen_qt

APP = Path(__file__).parents[2] / "examples" / "desktop_qt" / "app.py"
GUARD_S = 60.0
"""How long to wait for what should happen at once: a hang guard only."""


@pytest.fixture(scope="session")
def qt() -> ModuleType:
    """The example's module, with a QApplication on the offscreen platform."""
    try:
        ensure_offscreen_qt()
    except OffscreenQtUnavailable as exc:
        pytest.fail(f"the Qt example cannot be tested here: {exc}")
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication

    global _app
    _app = QApplication.instance() or QApplication([])
    spec = importlib.util.spec_from_file_location("desktop_qt_app", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_app: Any = None


@pytest.fixture
def window(qt: ModuleType, tmp_path: Path) -> Iterator[Any]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    window = qt.AgentWindow(qt.example_settings(workspace, data_dir=tmp_path / "data"))
    window.workspace = workspace
    window.show()
    yield window
    window.close()  # closes the kernel, as the app does
    assert window.kernel.closed
    # The window deletes itself on close: let Qt do it now, on this (the GUI) thread.
    from PySide6.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def wait_until(condition: Callable[[], bool]) -> None:
    """Run Qt's event loop (callbacks arrive through it) until ``condition`` holds."""
    from PySide6.QtTest import QTest

    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, "the window never got there"
        QTest.qWait(10)


def ask(window: Any, text: str) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    QTest.keyClicks(window.prompt, text)
    QTest.mouseClick(window.ask_button, Qt.MouseButton.LeftButton)


def click(button: Any) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


def done(window: Any) -> bool:
    return window.handle is None and window.status.text().startswith("Task ")


def test_the_answer_streams_into_the_window_on_the_gui_thread(window: Any) -> None:
    seen: list[tuple[str, bool]] = []

    def watch(event: TaskEvent) -> None:
        seen.append((event.kind, threading.current_thread() is threading.main_thread()))

    window.kernel.on_event(watch)
    ask(window, "hello there")
    assert not window.ask_button.isEnabled() and window.cancel_button.isEnabled()
    wait_until(lambda: done(window))
    assert window.status.text() == "Task succeeded."
    assert window.answer.toPlainText().startswith("Hello! I am the scripted demo model")
    assert sum(kind == "llm.delta" for kind, _ in seen) > 1  # it came in pieces
    assert all(on_gui for _, on_gui in seen)
    assert window.ask_button.isEnabled() and not window.cancel_button.isEnabled()


def test_approving_in_the_dialog_resumes_the_task(window: Any) -> None:
    ask(window, "save a note")
    wait_until(lambda: window.dialog is not None and window.dialog.isVisible())
    assert "write_file" in window.dialog.text.text() and "note.txt" in window.dialog.text.text()
    assert window.handle is not None
    assert window.kernel.get_task(window.handle.task_id).status is TaskStatus.WAITING_APPROVAL
    assert not (window.workspace / "note.txt").exists()
    click(window.dialog.approve_button)
    wait_until(lambda: done(window))
    assert window.status.text() == "Task succeeded."
    assert not window.dialog.isVisible()
    assert (window.workspace / "note.txt").read_text() == (
        "A note saved by the core-agent desktop example.\n"
    )
    assert "write_file (ok): wrote" in window.activity.toPlainText()
    assert window.answer.toPlainText().startswith("I asked to save note.txt")


def test_denying_in_the_dialog_keeps_the_file_unwritten(window: Any) -> None:
    ask(window, "save a note")
    wait_until(lambda: window.dialog is not None and window.dialog.isVisible())
    click(window.dialog.deny_button)
    wait_until(lambda: done(window))
    assert window.status.text() == "Task succeeded."  # the model was told no, and answered
    assert not (window.workspace / "note.txt").exists()
    assert "write_file (ApprovalDeniedError)" in window.activity.toPlainText()


def test_cancel_stops_the_task_and_closes_its_dialog(window: Any) -> None:
    ask(window, "save a note")
    wait_until(lambda: window.dialog is not None and window.dialog.isVisible())
    task_id = window.handle.task_id
    click(window.cancel_button)
    wait_until(lambda: done(window))
    assert window.status.text() == "Task canceled."
    wait_until(lambda: not window.dialog.isVisible())  # withdrawn: it closed itself
    assert window.dialog.answer.cancelled()
    assert not (window.workspace / "note.txt").exists()
    assert "canceled: canceled from the window" in window.activity.toPlainText()
    assert window.kernel.get_task(task_id).status is TaskStatus.CANCELED
