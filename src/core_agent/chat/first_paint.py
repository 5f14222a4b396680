"""The chat's first screen, drawn as soon as the command knows it will chat.

Importing the line editor (prompt_toolkit, asyncio) takes longer than a person takes to look
at the terminal, so the banner and the prompt are written first, with nothing but ``os`` and
``sys``. What is typed meanwhile is held (and echoed) by the terminal, and the line editor
takes the line over when it starts: it draws the prompt again in the same place, with what was
typed, and nothing is lost.
"""

from __future__ import annotations

import os
import sys

PROMPT = "› "
BANNER = "core-agent chat · {workspace} · /help lists commands · Ctrl-D quits"


def shown(path: str) -> str:
    """``path`` with the home directory as ``~``."""
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home != "/" and path.startswith(home + os.sep) else path


def banner(workspace: str) -> str:
    """The chat's first line."""
    return BANNER.format(workspace=shown(workspace))


def paint(workspace: str | None) -> bool:
    """Write the banner and the prompt, if both ends are a terminal; whether it did.

    Nothing is written for a workspace that is not a directory: the command says so instead.
    """
    where = os.path.abspath(os.path.expanduser(workspace or "."))
    if not (sys.stdin.isatty() and sys.stdout.isatty() and os.path.isdir(where)):
        return False
    sys.stdout.write(f"{banner(os.path.realpath(where))}\n{PROMPT}")
    sys.stdout.flush()
    return True


def hand_over() -> None:
    """Put the cursor back at the start of the prompt's line, where the line editor draws it.

    If a whole line was typed meanwhile (the terminal holds it, and echoed its newline), that
    is the line above.
    """
    up = ""
    try:
        import fcntl
        import struct
        import termios

        held = fcntl.ioctl(sys.stdin.fileno(), termios.FIONREAD, b"\0\0\0\0")
        if struct.unpack("i", held)[0]:  # the terminal passes on whole lines only
            up = "\x1b[1A"
    except (ImportError, OSError):
        pass  # no such call here (Windows): at worst the prompt shows twice
    sys.stdout.write(f"{up}\r")
    sys.stdout.flush()
