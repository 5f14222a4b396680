"""``IToolSandbox`` for one machine: workspace files, judged and confined commands, guarded HTTP.

Files are opened by the kernel itself through ``PathGuard``. Commands run in processes the
operating system confines (``confinement``, applied by the launcher process), so the limits
hold whatever the command line does; the ``CommandGuard`` judges lines for the policy. With
``mode="unconfined"`` (``AGENT_SANDBOX_MODE``) commands run as plain child processes: only
for machines without Landlock, and the kernel warns about it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
import httpx

from core_agent.contracts.errors import (
    ConfigurationError,
    ConfinementUnavailableError,
    SandboxRefusedError,
)
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.shell_parser import IShellParser
from core_agent.contracts.tool import CallPermit, Capability
from core_agent.contracts.tool_sandbox import (
    CommandAssessment,
    CommandResult,
    FetchResult,
    IToolSandbox,
    SandboxProfile,
    SandboxVerdict,
)
from providers.sandbox.commands import CommandGuard
from providers.sandbox.confinement import (
    CommandLimits,
    ProtectedEntries,
    ProtectedEntrySearch,
    carved_paths,
    command_environment,
    command_policy,
)
from providers.sandbox.git_history import HistoryPaths
from providers.sandbox.host_death_watch import HostDeathWatch
from providers.sandbox.launcher_client import CommandLauncher, ConfinedProcess, LauncherInfo
from providers.sandbox.network import NetworkGuard
from providers.sandbox.paths import PathGuard
from providers.sandbox.program_paths import default_search_path
from providers.sandbox.walk_screen import WalkScreen, screen_walks
from providers.shell.tree_sitter_parser import TreeSitterShellParser

log = logging.getLogger(__name__)

SandboxMode = Literal["confined", "unconfined"]
NamespaceUse = Literal["auto", "off"]
PROFILE_KIND = "local"
PROFILE_VERSION = 1
_KILL_WAIT_S = 5.0
_OPT_OUT = (
    "Set AGENT_SANDBOX_MODE=unconfined to run commands without it (they can then write "
    "anywhere your user can and use the network)."
)


class LocalToolSandbox(IToolSandbox):
    """Confines tools to workspace roots, confined commands and public (allowed) hosts.

    ``judge_commands=False`` switches the command judge off: every command line counts as
    allowed and writing, so only the operating system's confinement holds. It exists to test
    that confinement alone; never use it otherwise.
    """

    def __init__(
        self,
        *,
        roots: Sequence[Path],
        protected: Sequence[Path] = (),
        hidden: Sequence[Path] = (),
        allowed_commands: Sequence[str] = (),
        allowed_domains: Sequence[str] = ("*",),
        allowed_private_addresses: Sequence[str] = (),
        parser: IShellParser | None = None,
        max_output_bytes: int = 65_536,
        command_timeout_s: float = 30.0,
        max_fetch_bytes: int = 1_048_576,
        max_redirects: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
        mode: SandboxMode = "confined",
        namespaces: NamespaceUse = "auto",
        limits: CommandLimits | None = None,
        read_paths: Sequence[str] = (),
        launcher: CommandLauncher | None = None,
        judge_commands: bool = True,
    ) -> None:
        self._parser = parser or TreeSitterShellParser()
        self._transport = transport
        self._settings: dict[str, Any] = {
            "roots": [str(root) for root in roots],
            "protected": [str(path) for path in protected],
            "hidden": [str(path) for path in hidden],
            "allowed_commands": list(allowed_commands),
            "allowed_domains": list(allowed_domains),
            "allowed_private_addresses": list(allowed_private_addresses),
            "max_output_bytes": max_output_bytes,
            "command_timeout_s": command_timeout_s,
            "max_fetch_bytes": max_fetch_bytes,
            "max_redirects": max_redirects,
            "mode": mode,
            "namespaces": namespaces,
            "limits": asdict(limits or CommandLimits()),
            "read_paths": list(read_paths),
        }
        self.paths = PathGuard(roots, protected, hidden)
        self._history_paths = HistoryPaths()
        excluded = [*self.paths.roots, *self.paths.hidden]
        self.search_path = default_search_path(excluded)
        self.commands = CommandGuard(self._parser, allowed_commands, self.paths, self.search_path)
        # One for the sandbox's life: each command that may write searches before and after.
        self.protected_search = ProtectedEntrySearch(
            self.paths.roots, [*self.paths.protected, *self.paths.hidden]
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
        self._mode: SandboxMode = mode
        self._told_unconfinable = False
        self._told_no_process_limit = False
        self._namespaces: NamespaceUse = namespaces
        self._limits = limits or CommandLimits()
        self._read_paths = tuple(str(Path(p).resolve()) for p in read_paths)
        self._launcher = launcher or CommandLauncher()
        self._owns_launcher = launcher is None
        self._judge_commands = judge_commands
        self._info: LauncherInfo | None = None

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> LocalToolSandbox:
        """Roots from ``AGENT_WORKSPACE_ROOTS`` (else the current directory).

        The data directory is hidden from tools; it, the settings files and the prompts
        directory are protected (a tool that could write them could loosen the policy or
        rewrite the model's instructions for later tasks).
        """
        protected = [settings.data_dir, *settings.sandbox_protected_paths]
        protected.extend(
            p
            for p in (settings.policy_file, settings.env_file, settings.prompts_dir)
            if p is not None
        )
        return cls(
            roots=settings.workspace_roots or (Path.cwd(),),
            protected=protected,
            hidden=(settings.data_dir,),
            allowed_commands=settings.sandbox_allowed_commands,
            allowed_domains=settings.sandbox_allowed_domains,
            allowed_private_addresses=settings.sandbox_allowed_private_addresses,
            max_output_bytes=settings.sandbox_max_output_bytes,
            command_timeout_s=settings.sandbox_command_timeout_s,
            max_fetch_bytes=settings.sandbox_max_fetch_bytes,
            max_redirects=settings.sandbox_max_redirects,
            mode=settings.sandbox_mode,
            namespaces=settings.sandbox_namespaces,
            limits=CommandLimits(
                cpu_seconds=settings.sandbox_cpu_seconds,
                data_bytes=settings.sandbox_memory_mb << 20,
                file_bytes=settings.sandbox_max_file_mb << 20,
                processes=settings.sandbox_max_processes,
            ),
            read_paths=[str(p) for p in settings.sandbox_read_paths],
        )

    # -- profiles -------------------------------------------------------------------------

    def profile(self) -> SandboxProfile:
        """The settings as JSON data (``kind``, ``version`` and the constructor's values)."""
        return {"kind": PROFILE_KIND, "version": PROFILE_VERSION, **self._settings}

    def with_profile(self, profile: Mapping[str, Any]) -> LocalToolSandbox:
        """A sandbox with a recorded task's settings, sharing this one's launcher.

        A task recorded as ``unconfined`` runs confined when this sandbox is, and keeps the
        paths this sandbox protects or hides: a resumed task never gets looser limits than
        the process resolving it allows.
        """
        if profile.get("kind") != PROFILE_KIND or profile.get("version") != PROFILE_VERSION:
            raise ConfigurationError(
                f"the task's sandbox profile is not a local sandbox profile v{PROFILE_VERSION}: "
                f"{dict(profile).get('kind')!r} v{dict(profile).get('version')!r}"
            )
        values = {k: v for k, v in profile.items() if k in self._settings}
        if self._mode == "confined":
            values["mode"] = "confined"
        # Paths this process protects or hides (a prompts directory or policy file set up
        # since the task started) stay so for it too: a recorded profile only adds.
        for key in ("protected", "hidden"):
            values[key] = list(dict.fromkeys([*values.get(key, []), *self._settings[key]]))
        return self._derive(values)

    def with_roots(self, roots: Sequence[str | Path]) -> LocalToolSandbox:
        """The same sandbox over other workspace roots."""
        return self._derive({"roots": [str(root) for root in roots]})

    def _derive(self, changes: Mapping[str, Any]) -> LocalToolSandbox:
        values = {**self._settings, **changes}
        try:
            return LocalToolSandbox(
                roots=[Path(p) for p in values["roots"]],
                protected=[Path(p) for p in values["protected"]],
                hidden=[Path(p) for p in values["hidden"]],
                allowed_commands=values["allowed_commands"],
                allowed_domains=values["allowed_domains"],
                allowed_private_addresses=values["allowed_private_addresses"],
                parser=self._parser,
                max_output_bytes=int(values["max_output_bytes"]),
                command_timeout_s=float(values["command_timeout_s"]),
                max_fetch_bytes=int(values["max_fetch_bytes"]),
                max_redirects=int(values["max_redirects"]),
                transport=self._transport,
                mode=values["mode"],
                namespaces=values["namespaces"],
                limits=CommandLimits(**values["limits"]),
                read_paths=values["read_paths"],
                launcher=self._launcher,
                judge_commands=self._judge_commands,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"invalid sandbox profile: {exc}") from exc

    # -- checks -----------------------------------------------------------------------------

    def check_path(self, path: str | Path, capability: Capability) -> SandboxVerdict:
        """See ``PathGuard.check``."""
        return self.paths.check(path, capability)

    def assess_command(self, command: str) -> CommandAssessment:
        """See ``CommandGuard.assess``."""
        if not self._judge_commands and command.strip() and "\x00" not in command:
            return CommandAssessment(writes=True)
        return self.commands.assess(command)

    async def check_url(self, url: str) -> SandboxVerdict:
        """See ``NetworkGuard.check``."""
        return await self.network.verdict(url)

    @property
    def confinement(self) -> str:
        """``unconfined``, or the layers commands run under (known after the first one)."""
        if self._mode == "unconfined":
            return "unconfined"
        info = self._info
        if info is None:
            return "landlock"
        layers = [f"landlock-abi{info.landlock_abi}"]
        if info.namespaces and self._namespaces != "off":
            layers.append("namespaces")
        if info.seccomp:
            layers.append("seccomp")
        if info.process_limit == "cgroup":
            layers.append("pids-cgroup")
        return "+".join(layers)

    # -- files ------------------------------------------------------------------------------

    async def read_bytes(self, path: str | Path, *, max_bytes: int) -> tuple[bytes, bool]:
        """Read through ``PathGuard.read`` in a worker thread."""
        return await anyio.to_thread.run_sync(self.paths.read, path, max_bytes)

    async def write_bytes(self, path: str | Path, data: bytes) -> None:
        """Write through ``PathGuard.write`` in a worker thread."""
        await anyio.to_thread.run_sync(self.paths.write, path, data)

    async def list_files(self, directory: str | Path, *, limit: int) -> list[Path]:
        """List through ``PathGuard.list_files`` in a worker thread."""
        return await anyio.to_thread.run_sync(self.paths.list_files, directory, limit)

    async def fetch(self, url: str, *, max_bytes: int | None = None) -> FetchResult:
        """See ``NetworkGuard.fetch``."""
        return await self.network.fetch(url, max_bytes)

    # -- commands ---------------------------------------------------------------------------

    async def run_command(
        self, command: str, *, timeout_s: float | None = None, permit: CallPermit | None = None
    ) -> CommandResult:
        """Run ``command`` in the first root, confined to what ``permit`` allows."""
        assessment = self.assess_command(command)
        if assessment.refusal:
            raise SandboxRefusedError(assessment.refusal)
        permit = permit or CallPermit()
        screen = await self._screen_reads(command, assessment, permit)
        timeout = timeout_s or self._command_timeout_s
        program, argv = self._invocation(command)
        temporary = await anyio.to_thread.run_sync(
            lambda: tempfile.mkdtemp(prefix="core-agent-command-")
        )
        try:
            if self._mode == "unconfined":
                return await self._run_unconfined(program, argv, temporary, timeout)
            return await self._run_confined(program, argv, temporary, timeout, permit, screen)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(temporary, ignore_errors=True))

    async def _screen_reads(
        self, command: str, assessment: CommandAssessment, permit: CallPermit
    ) -> WalkScreen:
        """The files to hide from ``command``'s walks; refuses what cannot be screened.

        Walks (``grep -r``) get the files below them that the permit withholds, to hide;
        git commands that may print tracked contents are refused when the repository has
        held such a file (``git_history``).

        Raises:
            SandboxRefusedError: Too much to screen, or nothing could hide the files.
        """
        withheld = permit.withheld
        if withheld is None:
            return WalkScreen()
        screen = WalkScreen()
        if assessment.walks:
            screen = await anyio.to_thread.run_sync(
                screen_walks, self.paths, assessment.walks, withheld
            )
            if screen.refusal:
                raise SandboxRefusedError(screen.refusal)
            if screen.hidden and self._mode == "unconfined":
                raise SandboxRefusedError(
                    "the command reads every file below a directory holding files the policy "
                    f"keeps from it ({', '.join(screen.asking[:5]) or 'denied files'}), and "
                    "commands run unconfined here, so they cannot be hidden from it: search "
                    "the files it may read by name, or use the grep tool"
                )
        for read in assessment.histories:
            refusal = await anyio.to_thread.run_sync(
                self._history_paths.screen,
                self.paths,
                read,
                withheld,
                f"the command {command[:80]!r}",
            )
            if refusal:
                raise SandboxRefusedError(refusal)
        return screen

    def _invocation(self, command: str) -> tuple[str, list[str]]:
        """A plain command runs its program directly; anything else runs in bash."""
        parsed = self.commands.parse(command)
        if (
            parsed.ok
            and len(parsed.commands) == 1
            and not parsed.features
            and not parsed.redirections
            and not parsed.unproven
        ):
            simple = parsed.commands[0]
            program = self.commands.resolve(simple.argv[0])
            if program and not simple.dynamic and not simple.globbed and simple.origin == "top":
                return program, list(simple.argv)
        bash = self.commands.resolve("bash") or "/bin/bash"
        return bash, ["bash", "-c", command]

    async def command_readiness(self) -> str | None:
        """Why confined commands cannot run here, or ``None`` (always ``None`` unconfined)."""
        if self._mode == "unconfined":
            return None
        try:
            await self._confinement_info()
        except ConfinementUnavailableError as exc:
            return exc.reason
        return None

    async def _confinement_info(self) -> LauncherInfo:
        try:
            return await self._probe_confinement()
        except ConfinementUnavailableError as exc:
            if not self._told_unconfinable:
                # Said once, where the person sees it: every command will be refused.
                self._told_unconfinable = True
                log.warning("commands are refused: %s", exc.reason)
            raise

    async def _probe_confinement(self) -> LauncherInfo:
        if not sys.platform.startswith("linux"):
            raise ConfinementUnavailableError(
                f"commands run only under operating-system confinement, which core-agent "
                f"implements with Landlock on Linux; this is {sys.platform}. {_OPT_OUT}"
            )
        info = await self._launcher.info()
        self._info = info
        problem = None
        if info.landlock_abi < 1:
            problem = (
                "this kernel has no Landlock (it needs Linux 5.13 or later with landlock in "
                "its lsm= boot list)"
            )
        elif not (info.namespaces or info.seccomp):
            problem = (
                "this machine can cut commands off the network neither with namespaces nor seccomp"
            )
        if problem:
            raise ConfinementUnavailableError(
                f"commands run only under operating-system confinement, and {problem}. {_OPT_OUT}"
            )
        if info.process_limit == "none" and not self._told_no_process_limit:
            self._told_no_process_limit = True
            log.warning(
                "commands run as root without a process limit: Linux exempts root from "
                "RLIMIT_NPROC and no pids cgroup could be made here (a read-only cgroup file "
                "system?); a command can fork until the machine runs out of process ids. "
                "Run the kernel as another user, or give it a writable pids cgroup."
            )
        return info

    async def _run_confined(
        self,
        program: str,
        argv: list[str],
        temporary: str,
        limit_s: float,
        permit: CallPermit,
        screen: WalkScreen,
    ) -> CommandResult:
        info = await self._confinement_info()
        roots = self.paths.roots
        namespaces = info.namespaces and self._namespaces != "off"
        # Only a command that may write the roots could change a .git in them.
        before = ProtectedEntries({}, complete=True)
        if permit.write:
            before = await anyio.to_thread.run_sync(self.protected_search.search)
            refusal = before.refusal()
            if refusal:
                raise SandboxRefusedError(refusal)
        policy = command_policy(
            program=program,
            argv=argv,
            cwd=roots[0],
            environment=command_environment(self.search_path, temporary),
            roots=roots,
            carved=carved_paths(
                roots,
                self.paths.protected,
                [*self.paths.hidden, *map(Path, screen.hidden)],
                before.found,
            ),
            temporary=temporary,
            writable=permit.write,
            network=permit.network,
            namespaces=namespaces,
            search_path=self.search_path,
            extra_read=self._read_paths,
            limits=self._limits,
        )
        policy["seccomp"] = info.seccomp
        process = await self._launcher.spawn(policy)
        outputs, truncated, timed_out = await self._collect(process, limit_s)
        if process.errors and process.returncode in (126, 127):
            outputs["stderr"] += ("\n".join(process.errors) + "\n").encode()
        warnings: tuple[str, ...] = (screen.note,) if screen.note else ()
        if permit.write:
            after = await anyio.to_thread.run_sync(self.protected_search.search)
            new = tuple(_new_repository_warning(path) for path in after.added_since(before))
            for warning in new:
                log.warning("%s", warning)
            warnings += new
        return CommandResult(
            exit_code=process.returncode,
            stdout=outputs["stdout"].decode("utf-8", "replace"),
            stderr=outputs["stderr"].decode("utf-8", "replace"),
            truncated=truncated,
            timed_out=timed_out,
            confinement=self.confinement,
            warnings=warnings,
        )

    async def _collect(
        self, process: ConfinedProcess, limit_s: float
    ) -> tuple[dict[str, bytearray], bool, bool]:
        outputs = {"stdout": bytearray(), "stderr": bytearray()}
        truncated = timed_out = False

        async def drain(name: str, fd: int) -> None:
            nonlocal truncated
            while chunk := await process.read(fd):
                room = self._max_output - len(outputs[name])
                if room <= 0:
                    truncated = True
                    process.kill()
                    continue
                outputs[name] += chunk[:room]
                truncated = truncated or len(chunk) > room

        try:
            with anyio.move_on_after(limit_s) as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(drain, "stdout", process.stdout)
                    group.start_soon(drain, "stderr", process.stderr)
                    await process.ended()
            timed_out = scope.cancelled_caught
        finally:
            if process.returncode is None or timed_out:
                with anyio.CancelScope(shield=True):
                    process.kill()
                    with anyio.move_on_after(_KILL_WAIT_S):
                        await process.ended()
            process.close()
        process.check_started()
        return outputs, truncated, timed_out

    async def _run_unconfined(
        self, program: str, argv: list[str], temporary: str, limit_s: float
    ) -> CommandResult:
        environment = command_environment(self.search_path, temporary)
        process = await anyio.open_process(
            [program, *argv[1:]],
            cwd=self.paths.roots[0],
            env=environment,
            stdin=subprocess.DEVNULL,  # the host's own input (a stdio host's requests) stays its
            start_new_session=True,  # a process group we can kill whole
        )
        try:
            watch = await HostDeathWatch.start(process.pid)
        except BaseException:
            _kill_group(process)
            with anyio.CancelScope(shield=True):
                await process.wait()
            await process.aclose()
            raise
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
                    _kill_group(process)
                    return
                outputs[name] += chunk[:room]
                truncated = truncated or len(chunk) > room

        async with process:
            try:
                with anyio.move_on_after(limit_s) as scope:
                    async with anyio.create_task_group() as group:
                        group.start_soon(drain, "stdout", process.stdout)
                        group.start_soon(drain, "stderr", process.stderr)
                    await process.wait()
                timed_out = scope.cancelled_caught
            finally:
                _kill_group(process)
                await watch.stop()
                with anyio.CancelScope(shield=True):
                    await process.wait()
        return CommandResult(
            exit_code=process.returncode,
            stdout=outputs["stdout"].decode("utf-8", "replace"),
            stderr=outputs["stderr"].decode("utf-8", "replace"),
            truncated=truncated,
            timed_out=timed_out,
            confinement="unconfined",
        )

    async def close(self) -> None:
        """Stop the launcher process (when this sandbox started it)."""
        if self._owns_launcher:
            await self._launcher.close()


def _new_repository_warning(path: str) -> str:
    return (
        f"the command made {path}: git trusts it as a repository, and its hooks and config "
        "(which run programs) came from the command, not from you. Later commands cannot "
        "change it; check it (or remove it) before you run git there."
    )


def _kill_group(process: anyio.abc.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
