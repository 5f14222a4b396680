"""A small desktop window that embeds core-agent through its synchronous facade (PySide6).

Type a request and press Ask: the answer streams into the window, a risky tool call opens an
approval dialog (approving resumes the task, denying tells the model no), and Cancel stops
the task, an open dialog included. The kernel runs on its own thread (``SyncKernel``); its
callbacks come to the GUI thread through ``GuiDispatcher``, so every widget is only ever
touched on the GUI thread.

    pip install -e '.[qt]'
    python examples/desktop_qt/app.py [--workspace DIR]

With no ``AGENT_MODEL`` it uses the scripted model with ``script.json`` beside this file:
"save a note" asks to write ``note.txt`` in the workspace, anything else gets a greeting.
Set ``AGENT_MODEL`` to talk to a real model. Writes need approval here
(``AGENT_POLICY_APPROVAL_REQUIRED_RISK=medium``, unless set otherwise).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QCloseEvent, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from core_agent import AgentSettings, SyncKernel, TaskHandle, create_sync_kernel
from shared.agent_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    LLMDelta,
    TaskCanceled,
    TaskEvent,
    TaskFailed,
    TaskRequest,
    TaskResult,
    TaskSucceeded,
    ToolCompleted,
    ToolStarted,
)

HERE = Path(__file__).resolve().parent


def example_settings(workspace: Path, data_dir: Path | None = None) -> AgentSettings:
    """``AGENT_*`` settings, with this example's defaults for what they leave unset."""
    defaults: dict[str, Any] = {"workspace_roots": (workspace,)}
    if data_dir is not None:
        defaults["data_dir"] = data_dir
    if "AGENT_POLICY_APPROVAL_REQUIRED_RISK" not in os.environ:
        defaults["policy_approval_required_risk"] = "medium"  # ask before any write
    if "AGENT_MODEL" not in os.environ and "AGENT_SCRIPTED_MODEL_SCRIPT" not in os.environ:
        defaults["scripted_model_script"] = HERE / "script.json"
    return AgentSettings(**defaults)


class GuiDispatcher(QObject):
    """The facade's ``dispatch``: runs callables on the GUI thread.

    ``post`` is called on the kernel's thread. It emits a signal whose connection is queued:
    Qt delivers it through the event loop of the thread this object lives in (the GUI
    thread, which created it), where ``_run`` calls the callable.
    """

    _posted = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self._posted.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def post(self, callback: Callable[[], object]) -> None:
        """Queue ``callback`` for the GUI thread; returns at once, from any thread."""
        self._posted.emit(callback)

    @Slot(object)
    def _run(self, callback: Callable[[], object]) -> None:
        callback()


class ApprovalDialog(QDialog):
    """Asks the user about one risky call; its answer completes ``answer``.

    Non-modal for the event loop (``open``, not ``exec``): the window stays live, so its Cancel
    button still works. If the task stops waiting first, the kernel cancels ``answer`` and the
    dialog closes itself.
    """

    def __init__(self, request: ApprovalRequest, parent: QWidget) -> None:
        super().__init__(parent)
        self.request = request
        self.answer: Future[ApprovalDecision] = Future()
        self.setWindowTitle("Allow this action?")
        call = request.tool_call
        what = f"{call.name}({call.arguments})" if call is not None else request.question
        self.text = QLabel(
            f"The agent wants to run:\n{what}\n\nRisk: {request.risk.value}. {request.reason}"
        )
        self.text.setWordWrap(True)
        self.approve_button = QPushButton("Approve")
        self.deny_button = QPushButton("Deny")
        self.approve_button.clicked.connect(self.accept)
        self.deny_button.clicked.connect(self.reject)
        self.finished.connect(self._answer)  # the buttons, Escape or the close box
        buttons = QHBoxLayout()
        buttons.addWidget(self.approve_button)
        buttons.addWidget(self.deny_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text)
        layout.addLayout(buttons)
        # Runs on the GUI thread: the kernel withdraws the question through the dispatcher.
        self.answer.add_done_callback(lambda answer: self.reject() if answer.cancelled() else None)

    def _answer(self, code: int) -> None:
        if self.answer.done():
            return  # withdrawn
        approved = code == QDialog.DialogCode.Accepted
        self.answer.set_result(
            ApprovalDecision(
                request_id=self.request.request_id,
                approved=approved,
                reason="" if approved else "the user said no",
                decided_by="desktop user",
            )
        )


class AgentWindow(QWidget):
    """A prompt, an Ask and a Cancel button, the streamed answer and an activity log."""

    def __init__(self, settings: AgentSettings) -> None:
        super().__init__()
        # Freed on the GUI thread when closed, never by a garbage collection elsewhere.
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle("core-agent desktop example")
        self.dispatcher = GuiDispatcher()
        self.kernel: SyncKernel = create_sync_kernel(
            settings, dispatch=self.dispatcher.post, approval_callback=self.ask_approval
        )
        self.handle: TaskHandle[TaskResult] | None = None
        self.dialog: ApprovalDialog | None = None

        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("Ask something, or: save a note")
        self.ask_button = QPushButton("Ask")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.answer = QPlainTextEdit()
        self.answer.setReadOnly(True)
        self.activity = QPlainTextEdit()
        self.activity.setReadOnly(True)
        self.activity.setMaximumHeight(120)
        self.status = QLabel("Ready.")

        self.prompt.returnPressed.connect(self.ask)
        self.ask_button.clicked.connect(self.ask)
        self.cancel_button.clicked.connect(self.cancel)
        row = QHBoxLayout()
        row.addWidget(self.prompt)
        row.addWidget(self.ask_button)
        row.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(QLabel("Answer"))
        layout.addWidget(self.answer)
        layout.addWidget(QLabel("Activity"))
        layout.addWidget(self.activity)
        layout.addWidget(self.status)
        self.resize(640, 480)

    def ask(self) -> None:
        """Start a task for the prompt's text without blocking the GUI thread."""
        text = self.prompt.text().strip()
        if not text or self.handle is not None:
            return
        self.answer.clear()
        self.activity.clear()
        self.status.setText("Working…")
        self.ask_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.handle = self.kernel.submit(TaskRequest(task=text), on_event=self.show_event)
        self.handle.add_done_callback(self.finished)

    def cancel(self) -> None:
        """Cancel the running task (an open approval dialog closes with it)."""
        if self.handle is not None:
            self.handle.cancel("canceled from the window")

    def show_event(self, event: TaskEvent) -> None:
        """Called on the GUI thread for each event of the running task."""
        if isinstance(event, LLMDelta):
            self.answer.moveCursor(QTextCursor.MoveOperation.End)
            self.answer.insertPlainText(event.text)
        elif isinstance(event, ToolStarted):
            self.log(f"→ {event.tool_call.name} {event.tool_call.arguments}")
        elif isinstance(event, ApprovalRequested):
            self.log("… waiting for your approval")
        elif isinstance(event, ToolCompleted):
            outcome = event.result.error_type or "ok"
            self.log(f"← {event.result.name} ({outcome}): {event.result.content}")
        elif isinstance(event, TaskSucceeded) and not self.answer.toPlainText():
            self.answer.setPlainText(event.output)  # a model that did not stream
        elif isinstance(event, TaskFailed):
            self.log(f"failed: {event.error}")
        elif isinstance(event, TaskCanceled):
            self.log(f"canceled: {event.reason}")

    def log(self, line: str) -> None:
        """Add a line to the activity log."""
        self.activity.appendPlainText(line)

    def finished(self, handle: TaskHandle[TaskResult]) -> None:
        """Called on the GUI thread once the task has its result."""
        try:
            result = handle.result()
        except Exception as exc:
            self.status.setText(f"Error: {exc}")
        else:
            self.status.setText(f"Task {result.status.value}.")
        self.handle = None
        self.ask_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def ask_approval(self, request: ApprovalRequest) -> Future[ApprovalDecision]:
        """The facade's approval callback, on the GUI thread: open a dialog, answer later."""
        self.dialog = ApprovalDialog(request, self)
        self.dialog.open()
        return self.dialog.answer

    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop the kernel with the window (a running task ends canceled)."""
        self.kernel.close()
        super().closeEvent(event)


def main() -> int:
    """Open the window; returns when it is closed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=Path.cwd(), help="where tools may act")
    args = parser.parse_args()
    app = QApplication(sys.argv[:1])
    window = AgentWindow(example_settings(args.workspace.resolve()))
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
