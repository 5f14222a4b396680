"""``IToolSandbox`` for one machine: workspace roots, judged commands, guarded network."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import httpx

from core_agent.contracts.errors import SandboxRefusedError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.shell_parser import IShellParser
from core_agent.contracts.tool import Capability
from core_agent.contracts.tool_sandbox import (
    CommandResult,
    FetchResult,
    IToolSandbox,
    SandboxVerdict,
)
from providers.sandbox.commands import CommandGuard
from providers.sandbox.network import NetworkGuard
from providers.sandbox.paths import PathGuard
from providers.shell.tree_sitter_parser import TreeSitterShellParser

_PASSED_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
"""The only variables a command sees: API keys and tokens in the host's environment stay out."""


class LocalToolSandbox(IToolSandbox):
    """Confines tools to workspace roots, allowed commands and public (allowed) hosts."""

    def __init__(
        self,
        *,
        roots: Sequence[Path],
        protected: Sequence[Path] = (),
        allowed_commands: Sequence[str] = (),
        allowed_domains: Sequence[str] = ("*",),
        allowed_private_addresses: Sequence[str] = (),
        parser: IShellParser | None = None,
        max_output_bytes: int = 65_536,
        command_timeout_s: float = 30.0,
        max_fetch_bytes: int = 1_048_576,
        max_redirects: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.paths = PathGuard(roots, protected)
        self.commands = CommandGuard(
            parser or TreeSitterShellParser(), allowed_commands, self.paths
        )
        self.network = NetworkGuard(
            allowed_domains=allowed_domains,
            allowed_private=allowed_private_addresses,
            max_redirects=max_redirects,
            max_bytes=max_fetch_bytes,
            transport=transport,
        )
        self._max_output = max_output_bytes
        self._command_timeout_s = command_timeout_s

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> LocalToolSandbox:
        """Roots from ``AGENT_WORKSPACE_ROOTS`` (else the current directory).

        The kernel's data directory is protected.
        """
        return cls(
            roots=settings.workspace_roots or (Path.cwd(),),
            protected=(settings.data_dir,),
            allowed_commands=settings.sandbox_allowed_commands,
            allowed_domains=settings.sandbox_allowed_domains,
            allowed_private_addresses=settings.sandbox_allowed_private_addresses,
            max_output_bytes=settings.sandbox_max_output_bytes,
            command_timeout_s=settings.sandbox_command_timeout_s,
            max_fetch_bytes=settings.sandbox_max_fetch_bytes,
            max_redirects=settings.sandbox_max_redirects,
        )

    def check_path(self, path: str | Path, capability: Capability) -> SandboxVerdict:
        """See ``PathGuard.check``."""
        return self.paths.check(path, capability)

    def check_command(self, command: str) -> SandboxVerdict:
        """See ``CommandGuard.check``."""
        return self.commands.check(command)

    async def check_url(self, url: str) -> SandboxVerdict:
        """See ``NetworkGuard.check``."""
        return await self.network.verdict(url)

    async def read_bytes(self, path: str | Path, *, max_bytes: int) -> tuple[bytes, bool]:
        """Read through ``PathGuard.read`` in a worker thread."""
        return await anyio.to_thread.run_sync(self.paths.read, path, max_bytes)

    async def write_bytes(self, path: str | Path, data: bytes) -> None:
        """Write through ``PathGuard.write`` in a worker thread."""
        await anyio.to_thread.run_sync(self.paths.write, path, data)

    async def list_files(self, directory: str | Path, *, limit: int) -> list[Path]:
        """List through ``PathGuard.list_files`` in a worker thread."""
        return await anyio.to_thread.run_sync(self.paths.list_files, directory, limit)

    async def run_command(self, command: str, *, timeout_s: float | None = None) -> CommandResult:
        """Run an allowed command; a plain one as an argv list, a compound one with bash."""
        verdict = self.commands.check(command)
        if not verdict.allowed:
            raise SandboxRefusedError(verdict.reason)
        parsed = self.commands.parse(command)
        plain = (
            len(parsed.commands) == 1
            and not parsed.features
            and not parsed.redirections
            and not parsed.commands[0].dynamic
            and parsed.commands[0].origin == "top"
        )
        argv = list(parsed.commands[0].argv) if plain else ["bash", "-c", command]
        environment = {k: os.environ[k] for k in _PASSED_ENVIRONMENT if k in os.environ}
        timeout = timeout_s or self._command_timeout_s
        process = await anyio.open_process(
            argv,
            cwd=self.paths.roots[0],
            env=environment,
            stdin=None,
            start_new_session=True,  # a process group we can kill whole
        )
        outputs: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        truncated = timed_out = False

        async def drain(name: str, stream: anyio.abc.ByteReceiveStream | None) -> None:
            nonlocal truncated
            if stream is None:
                return
            async for chunk in stream:
                room = self._max_output - len(outputs[name])
                if room <= 0:
                    truncated = True
                    _kill(process)
                    return
                outputs[name] += chunk[:room]
                truncated = truncated or len(chunk) > room

        async with process:
            with anyio.move_on_after(timeout) as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(drain, "stdout", process.stdout)
                    group.start_soon(drain, "stderr", process.stderr)
                await process.wait()
            if scope.cancelled_caught:
                timed_out = True
                _kill(process)
                with anyio.CancelScope(shield=True):
                    await process.wait()
        return CommandResult(
            exit_code=process.returncode,
            stdout=outputs["stdout"].decode("utf-8", "replace"),
            stderr=outputs["stderr"].decode("utf-8", "replace"),
            truncated=truncated,
            timed_out=timed_out,
        )

    async def fetch(self, url: str, *, max_bytes: int | None = None) -> FetchResult:
        """See ``NetworkGuard.fetch``."""
        return await self.network.fetch(url, max_bytes)


def _kill(process: anyio.abc.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
