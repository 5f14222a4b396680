"""The line editor: prompt_toolkit, with history in the data directory and multi-line input.

Enter sends. A new line is Esc then Enter (Alt+Enter in most terminals), or a line ending in
a backslash; pasted text keeps its lines. Ctrl-C clears what is being typed, Ctrl-D on an
empty line ends the chat.

The history file is ``chat_history`` in the data directory, whose place is known only once
the settings are read, in the background: ``DeferredFileHistory`` keeps what is typed before
that and loads the file once it is told where it is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.formatted_text import AnyFormattedText
from prompt_toolkit.history import FileHistory, History, ThreadedHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from core_agent.chat.first_paint import PROMPT
from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.private_files import make_private_folder, secure_private_file

CONTINUATION = "… "
HISTORY_FILE = "chat_history"


class DeferredFileHistory(History):
    """A ``FileHistory`` whose file is named later (``open``), from another thread.

    Loading waits until then (it runs in prompt_toolkit's loader thread); lines entered
    before are written to the file when it is opened. Without a usable file (``open(None)``,
    or the folder cannot be made) the history lasts as long as the chat. The file is the
    user's alone (mode 0600, like a shell's), and what is written to it is redacted as the
    kernel's stores are (keys, credential variables, ``AGENT_REDACT_PATTERNS``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._opened = threading.Event()
        self._file: FileHistory | None = None
        self._redact: Callable[[str], str] = str
        self._early: list[str] = []

    def open(self, path: Path | None, redact: Callable[[str], str] = str) -> None:
        """Use ``path`` from now on (``None``: no file); safe to call from any thread.

        ``redact`` is applied to each line before it is written.
        """
        file = None
        if path is not None:
            try:
                make_private_folder(path.parent, what="data directory")
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                os.close(os.open(path, flags, 0o600))
                # One an earlier version left (0644) is made private; another user's refused.
                secure_private_file(path, what="chat history")
                file = FileHistory(str(path))
            except (OSError, ConfigurationError):
                file = None  # the data directory's own error is reported by the kernel
        with self._lock:
            self._file, self._redact = file, redact
            early, self._early = self._early, []
            self._opened.set()
        for line in early:
            self._write(line)

    def load_history_strings(self) -> Iterable[str]:
        """The file's lines, newest first, once it is known (blocks until then)."""
        self._opened.wait()
        return self._file.load_history_strings() if self._file is not None else ()

    def store_string(self, string: str) -> None:
        """Append ``string`` to the file (kept until the file is known)."""
        with self._lock:
            if not self._opened.is_set():
                self._early.append(string)
                return
        self._write(string)

    def _write(self, string: str) -> None:
        if self._file is None:
            return
        try:
            self._file.store_string(self._redact(string))
        except OSError:
            self._file = None  # a full disk costs the history, not the chat


def _bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("enter")
    def _send_or_continue(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        document = buffer.document
        if document.is_cursor_at_the_end and document.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @bindings.add("escape", "enter")
    def _new_line(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


class LineEditor:
    """Reads messages and commands, and answers to questions asked during a turn."""

    def __init__(self, history: History, toolbar: Callable[[], AnyFormattedText]) -> None:
        self._session: PromptSession[str] = PromptSession(
            history=ThreadedHistory(history),
            key_bindings=_bindings(),
            multiline=True,
            prompt_continuation=lambda width, line, wrap: CONTINUATION.rjust(width),
            bottom_toolbar=toolbar,
        )
        self._questions: PromptSession[str] | None = None  # made when first asked: start fast
        self._first_render: list[Callable[[], None]] = []
        self._session.app.after_render += self._rendered

    def on_first_render(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, right after the prompt is first drawn."""
        self._first_render.append(callback)

    def _rendered(self, _app: object) -> None:
        callbacks, self._first_render = self._first_render, []
        for callback in callbacks:
            callback()

    def refresh(self) -> None:
        """Draw the prompt again (the status line changed), if it is showing."""
        if self._session.app.is_running:
            self._session.app.invalidate()

    async def above(self, write: Callable[[], None]) -> None:
        """Call ``write`` with the prompt (if one shows) out of its way, then draw it again."""
        app = self._session.app
        if not app.is_running:
            write()
            return
        with set_app(app):
            await run_in_terminal(write)

    def stop(self, error: BaseException) -> None:
        """End the prompt that is showing, if one is, by raising ``error`` from ``read``."""
        if self._session.app.is_running:
            self._session.app.exit(exception=error)

    async def read(self) -> str | None:
        """The next message or command; ``""`` after Ctrl-C, ``None`` after Ctrl-D."""
        try:
            # Ctrl-C is a key while the prompt shows; the chat's own SIGINT handler stays.
            return await self._session.prompt_async(PROMPT, handle_sigint=False)
        except KeyboardInterrupt:
            return ""
        except EOFError:
            return None

    async def ask(self, question: AnyFormattedText) -> str:
        """One line of answer to ``question`` (no history).

        Raises:
            KeyboardInterrupt: The person pressed Ctrl-C.
            EOFError: The person pressed Ctrl-D.
        """
        if self._questions is None:
            self._questions = PromptSession()
        return await self._questions.prompt_async(question, handle_sigint=False)
