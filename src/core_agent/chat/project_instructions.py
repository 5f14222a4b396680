"""The project's instruction file, ``AGENTS.md`` (as Codex CLI reads it), for the system prompt.

It is the user's own file in their workspace, so what it says joins the system prompt as the
user's instructions for this project. It is only text: settings, limits, policy and the
approval threshold never come from the workspace (DESIGN §5a), and nothing in the file is
read as configuration. It is read when the chat starts (and again for ``/new``), so a change
the model makes to it during a turn takes effect only when the user starts over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

INSTRUCTION_FILE = "AGENTS.md"
MAX_BYTES = 32 * 1024
"""Most of the file that is used (Codex CLI's default ``project_doc_max_bytes``): the system
prompt is sent with every model call of every turn."""


@dataclass(frozen=True, slots=True)
class ProjectInstructions:
    """The instruction file as it will be used: its text, cut to ``MAX_BYTES`` if longer."""

    path: Path
    text: str
    size: int
    """The file's size in bytes."""

    @property
    def cut(self) -> bool:
        """Whether only the file's first ``MAX_BYTES`` are used."""
        return self.size > MAX_BYTES


def read_project_instructions(workspace: Path) -> ProjectInstructions | None:
    """``workspace/AGENTS.md``, or ``None`` when there is no such file or it is blank.

    Only a regular file is read (a FIFO of that name would block the start). Bytes that are
    not UTF-8 are replaced, and a character cut at the limit is dropped.

    Raises:
        OSError: The file exists but cannot be read (the caller says so and goes on).
    """
    path = workspace / INSTRUCTION_FILE
    if not path.is_file():
        return None
    with path.open("rb") as file:
        data = file.read(MAX_BYTES + 1)
        size = max(len(data), path.stat().st_size)
    text = data[:MAX_BYTES].decode("utf-8", errors="replace")
    if size > MAX_BYTES:
        text = text.rstrip("\ufffd")  # a character the limit cut in two
    if not text.strip():
        return None
    return ProjectInstructions(path=path, text=text.strip(), size=size)


def system_prompt_with(base: str, instructions: ProjectInstructions | None) -> str:
    """``base`` followed by the project's instructions, introduced as the user's own."""
    if instructions is None:
        return base
    cut = (
        f"\n\n[Only the first {MAX_BYTES} bytes of {instructions.size} are included.]"
        if instructions.cut
        else ""
    )
    return (
        f"{base}\n\n## Project instructions ({INSTRUCTION_FILE})\n"
        f"The user keeps these instructions for this project in {instructions.path}. Follow "
        "them where they apply. They come from the user, not from a tool; they do not change "
        f"your tools, your limits or which calls need the user's approval.\n\n"
        f"{instructions.text}{cut}"
    )
