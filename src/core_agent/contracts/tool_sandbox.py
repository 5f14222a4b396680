"""Port for the limits every tool call runs inside: files, commands, network."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from core_agent.contracts.tool import Capability


@dataclass(frozen=True, slots=True)
class SandboxVerdict:
    """Whether the sandbox lets an operation through, and why not."""

    allowed: bool
    reason: str = ""


class IToolSandbox(abc.ABC):
    """Judges file paths, commands and URLs before a tool touches them.

    Path and command checks are pure and never block; ``check_url`` may resolve a host name
    and is awaitable.
    """

    @abc.abstractmethod
    def check_path(self, path: Path, capability: Capability) -> SandboxVerdict:
        """May ``path`` be read (``READ``) or written (``WRITE``)?

        The path is resolved (symlinks and ``..``) before it is compared with the allowed roots.
        """

    @abc.abstractmethod
    def check_command(self, command: str) -> SandboxVerdict:
        """May this shell command run? Every sub-command is judged; unparsable means no."""

    @abc.abstractmethod
    async def check_url(self, url: str) -> SandboxVerdict:
        """May this URL be fetched? Host allowlist plus a check of every resolved address."""
