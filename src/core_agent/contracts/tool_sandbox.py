"""Port for the limits every tool call runs inside: files, commands, network."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from core_agent.contracts.tool import Capability


@dataclass(frozen=True, slots=True)
class SandboxVerdict:
    """Whether the sandbox lets an operation through, and why not."""

    allowed: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command printed and how it ended; output beyond the cap is cut and flagged."""

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class FetchResult:
    """An HTTP response as far as the sandbox let it through."""

    status: int
    url: str
    """The final URL, after redirects."""
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    truncated: bool = False
    redirects: tuple[str, ...] = ()


class IToolSandbox(abc.ABC):
    """Judges and performs file, command and network operations for tools.

    Every performing method checks first and raises ``SandboxRefusedError`` (with the reason)
    instead of acting when the check fails. Path and command checks are pure and never block;
    network checks resolve names and are awaitable; performing methods are awaitable and keep
    blocking work off the event loop.
    """

    @abc.abstractmethod
    def check_path(self, path: str | Path, capability: Capability) -> SandboxVerdict:
        """May ``path`` be read (``READ``) or written (``WRITE``)?

        The path is resolved (symlinks, ``..``) before it is compared with the allowed roots;
        protected paths (the kernel's data directory, ``.git``) are never writable, whether
        they exist yet or not.
        """

    @abc.abstractmethod
    def check_command(self, command: str) -> SandboxVerdict:
        """May this shell command run? Every sub-command is judged; unparsable means no."""

    @abc.abstractmethod
    async def check_url(self, url: str) -> SandboxVerdict:
        """May this URL be fetched? Domain allowlist plus a check of every resolved address."""

    @abc.abstractmethod
    async def read_bytes(self, path: str | Path, *, max_bytes: int) -> tuple[bytes, bool]:
        """Read up to ``max_bytes`` of a file inside the roots.

        Never reads through a symlink that leaves them. Returns the bytes and whether the
        file was longer.

        Raises:
            SandboxRefusedError: The path is outside the roots or not a regular file.
            ToolExecutionError: The file cannot be read (missing, permissions).
        """

    @abc.abstractmethod
    async def write_bytes(self, path: str | Path, data: bytes) -> None:
        """Replace (or create) a file atomically; parent directories must exist.

        Raises:
            SandboxRefusedError: Outside the roots, protected, or through a symlink.
        """

    @abc.abstractmethod
    async def list_files(self, directory: str | Path, *, limit: int) -> list[Path]:
        """Regular files below ``directory``, as paths relative to it, up to ``limit``.

        Symlinks are not followed.
        """

    @abc.abstractmethod
    async def run_command(self, command: str, *, timeout_s: float | None = None) -> CommandResult:
        """Run a command that ``check_command`` allows, in the first root.

        Output and time are capped.

        Raises:
            SandboxRefusedError: The command is not allowed (the reason names the part).
        """

    @abc.abstractmethod
    async def fetch(self, url: str, *, max_bytes: int | None = None) -> FetchResult:
        """GET ``url``, connecting only to checked addresses and re-checking every redirect.

        Raises:
            SandboxRefusedError: A URL on the way is not allowed.
            ToolExecutionError: The request failed.
        """
