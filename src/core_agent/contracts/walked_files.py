"""The files a walking tool (``grep``, ``list_files``, ``glob``) may read below a directory.

A walk is graded by its directory; the files below it are screened one by one against the
policy through the call's permit (``CallPermit.withheld``), so that a rule on ``.env`` or
``private/**`` holds for a search over the whole workspace too.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread

from core_agent.contracts.errors import ToolExecutionError
from core_agent.contracts.tool import Capability, ToolContext


async def walked_files(
    context: ToolContext, tool: str, directory: str, limit: int
) -> tuple[list[Path], str]:
    """Files below ``directory`` (relative to it) the call may read, and a note on the others.

    The permit's ``withheld`` screen keeps out what a policy rule would not let this call
    read: a denied file is counted, not named; one that needs a human is named, so that the
    model can ask for it alone (and a human be asked).
    """
    sandbox = context.sandbox
    if sandbox is None:
        raise ToolExecutionError(f"{tool} needs a sandbox and none is configured", tool_name=tool)
    files = await sandbox.list_files(directory, limit=limit)
    screen = context.permit.withheld
    if screen is None:
        return files, ""

    def screened() -> tuple[list[Path], str]:
        # The walk follows no link, so a file's path is its directory's (resolved once) and
        # its own below it: no resolving per file, which cost more than the screen.
        base = sandbox.check_path(directory, Capability.READ).path
        kept: list[Path] = []
        denied, asking = 0, []
        for relative in files:
            if base is None:
                kept.append(relative)
                continue
            path = posixpath.normpath(posixpath.join(base, relative.as_posix()))
            kept_out = screen(path)
            if kept_out is None:
                kept.append(relative)
            elif kept_out.denied:
                denied += 1
            else:
                asking.append(path)
        return kept, withheld_note(asking, denied)

    return await anyio.to_thread.run_sync(screened)


def withheld_note(asking: Sequence[str], denied: int) -> str:
    """What a walk tells the model of the files it left out ("" when none).

    ``asking``: the files reading which needs a human, named so the model can ask for one
    alone; ``denied``: how many a rule denies, counted without naming them.
    """
    notes = []
    if asking:
        notes.append(
            f"[not read: reading these needs a human's approval, name them alone: "
            f"{', '.join(asking[:20])}]"
        )
    if denied:
        notes.append(f"[{denied} files left out: a policy rule denies them]")
    return "\n".join(notes)
