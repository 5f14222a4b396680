"""Port for the limits every tool call runs inside: files, commands, network."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core_agent.contracts.tool import CallPermit, Capability

SandboxProfile = dict[str, Any]
"""A sandbox's settings as JSON data (roots, allowed commands, limits...), recorded with each
task so that a resumed task runs under the limits it started with."""


@dataclass(frozen=True, slots=True)
class SandboxVerdict:
    """Whether the sandbox lets an operation through, and why not.

    ``path``: for an allowed path, where it leads as the sandbox opens it (symlinks and
    ``..`` resolved), relative to its workspace root, ``/``-separated (``.`` for a root):
    what policy path rules are matched against, whatever spelling reached it.
    """

    allowed: bool
    reason: str = ""
    path: str | None = None


@dataclass(frozen=True, slots=True)
class GitContentRead:
    """What of a repository one git command may print the contents of."""

    directory: str
    """Where git runs (resolved)."""
    limits: tuple[str, ...] = ()
    """The paths it limits itself to, relative to ``directory`` (empty: every path)."""
    revisions: tuple[str, ...] | None = None
    """The revisions it reads besides the index and the work tree (``git diff A B``,
    ``--cached``: ``HEAD``; ``git show REV:path``), as given; ``None`` when it may reach any
    commit (``git log -p``, ``git show``)."""
    index: bool = True
    """Whether it reads the index too (``git show REV:path`` does not)."""
    commits_named_only: bool = False
    """It prints only names and counts of what ``revisions`` changed, provided each names a
    commit (``git show --stat HEAD``); any other object may be printed whole."""


@dataclass(frozen=True, slots=True)
class CommandAssessment:
    """What the sandbox can tell about a command line before it runs.

    ``refusal``: it cannot run at all (empty, a NUL byte, a write the confinement would
    refuse anyway). ``unproven``: why it is not provably an allowed, read-only command
    (a construct the parser cannot read statically, a program not on the allowlist or named
    by path, an option that writes or runs programs, a path outside the workspace); such a
    command needs a human's approval. ``writes``: it is allowed but changes workspace files
    (a redirection, or a configured program that may write).
    """

    refusal: str | None = None
    unproven: tuple[str, ...] = ()
    writes: bool = False
    programs: tuple[str, ...] = ()
    """Absolute paths of the programs it runs, as found on the commands' search path."""
    paths: tuple[str, ...] = ()
    """The workspace paths it names (operands, redirections), as ``SandboxVerdict.path``
    gives them; a directory whose files it reads (a glob's) ends with ``/``."""
    walks: tuple[str, ...] = ()
    """The directories, resolved (absolute, links followed), below which it reads every file
    (``grep -r``, ``rg``, ``diff -r``). The sandbox keeps from the command the files below
    them that the call's permit withholds (``CallPermit.withheld``)."""
    histories: tuple[GitContentRead, ...] = ()
    """Each git command that may print tracked files' contents (``git diff``, ``git show``,
    ``git log -p``). The sandbox refuses it when what it may read of the repository holds a
    file the call's permit withholds."""

    @property
    def allowed(self) -> bool:
        """Runs without a human: not refused, and every part proven."""
        return self.refusal is None and not self.unproven


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command printed and how it ended; output beyond the cap is cut and flagged."""

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False
    confinement: str = ""
    """How the operating system confined it (``landlock+namespaces+seccomp``, ``unconfined``)."""
    warnings: tuple[str, ...] = ()
    """What the person should check that the confinement could not prevent (a new ``.git``)."""


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
        they exist yet or not, and the data directory is not readable either.
        """

    @abc.abstractmethod
    def assess_command(self, command: str) -> CommandAssessment:
        """Judge a shell command line without running it (see ``CommandAssessment``).

        Every sub-command is judged; programs are resolved on the commands' search path
        first. Pure and fast.
        """

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
    async def run_command(
        self, command: str, *, timeout_s: float | None = None, permit: CallPermit | None = None
    ) -> CommandResult:
        """Run a command in the first root, confined by the operating system.

        The process and everything it starts may read the workspace and the system's
        programs, write only where ``permit`` allows (never ``.git``, the data directory or
        protected paths), reach the network only with ``permit.network``, and are killed when
        the command ends, times out or the call is cancelled. Output and time are capped.
        Whether the command needed approval is the policy's business, not this method's.

        Raises:
            SandboxRefusedError: The command cannot run (``assess_command`` refused it).
            ConfinementUnavailableError: The operating system cannot confine it here (the
                reason says how to opt out explicitly).
        """

    @abc.abstractmethod
    async def fetch(self, url: str, *, max_bytes: int | None = None) -> FetchResult:
        """GET ``url``, connecting only to checked addresses and re-checking every redirect.

        Raises:
            SandboxRefusedError: A URL on the way is not allowed.
            ToolExecutionError: The request failed.
        """

    @property
    @abc.abstractmethod
    def confinement(self) -> str:
        """How commands are confined here, for traces (``unconfined`` when opted out)."""

    @abc.abstractmethod
    def profile(self) -> SandboxProfile:
        """This sandbox's settings as JSON data, to record with a task."""

    @abc.abstractmethod
    def with_profile(self, profile: Mapping[str, Any]) -> IToolSandbox:
        """A sandbox with a recorded task's settings (sharing this one's resources).

        Raises:
            ConfigurationError: The profile is not one this sandbox wrote.
        """

    @abc.abstractmethod
    def with_roots(self, roots: Sequence[str | Path]) -> IToolSandbox:
        """A sandbox like this one whose workspace is ``roots``."""

    @abc.abstractmethod
    async def command_readiness(self) -> str | None:
        """Why commands cannot run here (no confinement available), or ``None`` when they can.

        May start helper processes; never runs a command.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release processes and connections the sandbox started; idempotent."""
