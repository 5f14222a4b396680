"""File tools: read, write, edit by exact replacement, list and grep, inside the sandbox.

Each checks its path against the sandbox before it runs (``assess``), so a call on a path
the sandbox refuses is refused up front, and ``core-agent policy check`` reports it. ``grep``
uses RE2, whose matching time is linear in the input (no pattern can make it backtrack for
seconds), and searches in a worker thread with an overall time limit.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio.to_thread
import re2
from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.errors import ToolExecutionError
from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability, ToolAssessment, ToolContext
from core_agent.contracts.tool_sandbox import IToolSandbox
from core_agent.contracts.walked_files import walked_files

MAX_READ_BYTES = 256_000
MAX_LISTED = 2_000
GREP_TIME_LIMIT_S = 20.0
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def path_assessment(
    context: ToolContext, path: str, capability: Capability, *, walks: bool = False
) -> ToolAssessment:
    """Refuse a path the call's sandbox refuses (no opinion without a sandbox).

    An allowed path is named as the sandbox resolves it, for the policy's path rules; a
    directory the call ``walks`` (reads every file below) ends with ``/``.
    """
    if context.sandbox is None:
        return ToolAssessment()
    verdict = context.sandbox.check_path(path, capability)
    if not verdict.allowed:
        return ToolAssessment(refusal=verdict.reason)
    if verdict.path is None:
        return ToolAssessment()
    return ToolAssessment(paths=(f"{verdict.path}/" if walks else verdict.path,))


def compile_pattern(pattern: str) -> Any:
    """The pattern compiled with RE2 (``ToolExecutionError`` with RE2's reason)."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ToolExecutionError(
            f"invalid pattern (RE2 syntax: no backreferences or lookaround): {reason}",
            tool_name="grep",
        ) from exc


def sandbox_of(context: ToolContext, tool: str) -> IToolSandbox:
    """The call's sandbox; file, command and network tools refuse to run without one."""
    if context.sandbox is None:
        raise ToolExecutionError(f"{tool} needs a sandbox and none is configured", tool_name=tool)
    return context.sandbox


def _decode(data: bytes, path: str, tool: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolExecutionError(f"{path} is not UTF-8 text", tool_name=tool) from exc


class ReadFileArguments(BaseModel):
    """Arguments of ``read_file``."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, description="File path, relative to the workspace.")


class ReadFileTool(ModelArgumentsTool[ReadFileArguments]):
    """Read a UTF-8 text file from the workspace."""

    name: ClassVar[str] = "read_file"
    description: ClassVar[str] = "Read a UTF-8 text file from the workspace."
    arguments_model: ClassVar[type[BaseModel]] = ReadFileArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> ReadFileTool:
        """No settings needed."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse a path outside the workspace or hidden."""
        return path_assessment(context, arguments["args"].path, Capability.READ)

    async def execute(self, args: ReadFileArguments, context: ToolContext) -> str:
        """The file's text (cut at 256 kB, with a note)."""
        data, truncated = await sandbox_of(context, self.name).read_bytes(
            args.path, max_bytes=MAX_READ_BYTES
        )
        text = _decode(data, args.path, self.name)
        return text + (f"\n[... file longer than {MAX_READ_BYTES} bytes ...]" if truncated else "")


class WriteFileArguments(BaseModel):
    """Arguments of ``write_file``."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, description="File path, relative to the workspace.")
    content: str = Field(description="The whole new content of the file.")


class WriteFileTool(ModelArgumentsTool[WriteFileArguments]):
    """Create or replace a file."""

    name: ClassVar[str] = "write_file"
    description: ClassVar[str] = "Create or replace a text file in the workspace (atomically)."
    arguments_model: ClassVar[type[BaseModel]] = WriteFileArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.WRITE})
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> WriteFileTool:
        """No settings needed."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse a path outside the workspace or protected."""
        verdict = path_assessment(context, arguments["args"].path, Capability.WRITE)
        return ToolAssessment(refusal=verdict.refusal, writes=True, paths=verdict.paths)

    async def execute(self, args: WriteFileArguments, context: ToolContext) -> str:
        """Write and report the size."""
        data = args.content.encode("utf-8")
        await sandbox_of(context, self.name).write_bytes(args.path, data)
        return f"wrote {len(data)} bytes to {args.path}"


class EditFileArguments(BaseModel):
    """Arguments of ``edit_file``."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, description="File path, relative to the workspace.")
    old_text: str = Field(min_length=1, description="Exact text to replace; must occur once.")
    new_text: str = Field(description="Replacement text.")


class EditFileTool(ModelArgumentsTool[EditFileArguments]):
    """Replace one exact occurrence of a text in a file."""

    name: ClassVar[str] = "edit_file"
    description: ClassVar[str] = (
        "Replace exactly one occurrence of old_text with new_text in a workspace file. "
        "Fails if old_text is missing or occurs more than once."
    )
    arguments_model: ClassVar[type[BaseModel]] = EditFileArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ, Capability.WRITE})

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> EditFileTool:
        """No settings needed."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse a path outside the workspace or protected."""
        verdict = path_assessment(context, arguments["args"].path, Capability.WRITE)
        return ToolAssessment(refusal=verdict.refusal, writes=True, paths=verdict.paths)

    async def execute(self, args: EditFileArguments, context: ToolContext) -> str:
        """Read, check the occurrence count, write back."""
        sandbox = sandbox_of(context, self.name)
        data, truncated = await sandbox.read_bytes(args.path, max_bytes=4 * MAX_READ_BYTES)
        if truncated:
            raise ToolExecutionError(f"{args.path} is too large to edit", tool_name=self.name)
        text = _decode(data, args.path, self.name)
        count = text.count(args.old_text)
        if count != 1:
            found = "not found" if count == 0 else f"found {count} times"
            raise ToolExecutionError(
                f"old_text {found} in {args.path}; it must occur exactly once",
                tool_name=self.name,
            )
        await sandbox.write_bytes(
            args.path, text.replace(args.old_text, args.new_text, 1).encode("utf-8")
        )
        return f"edited {args.path}"


class ListFilesArguments(BaseModel):
    """Arguments of ``list_files``."""

    model_config = ConfigDict(extra="forbid")
    directory: str = Field(default=".", description="Directory, relative to the workspace.")
    pattern: str = Field(default="*", description="Glob on the relative path, e.g. '**/*.py'.")


class ListFilesTool(ModelArgumentsTool[ListFilesArguments]):
    """List workspace files matching a glob."""

    name: ClassVar[str] = "list_files"
    description: ClassVar[str] = "List files under a workspace directory matching a glob."
    arguments_model: ClassVar[type[BaseModel]] = ListFilesArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> ListFilesTool:
        """No settings needed."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse a directory outside the workspace."""
        return path_assessment(context, arguments["args"].directory, Capability.READ, walks=True)

    async def execute(self, args: ListFilesArguments, context: ToolContext) -> str:
        """One relative path per line."""
        files, withheld = await walked_files(context, self.name, args.directory, MAX_LISTED)
        matches = [
            str(path)
            for path in files
            if fnmatch.fnmatch(str(path), args.pattern) or fnmatch.fnmatch(path.name, args.pattern)
        ]
        suffix = f"\n[... stopped at {MAX_LISTED} files ...]" if len(files) >= MAX_LISTED else ""
        suffix += f"\n{withheld}" if withheld else ""
        return ("\n".join(matches) if matches else "(no matching files)") + suffix


class GrepArguments(BaseModel):
    """Arguments of ``grep``."""

    model_config = ConfigDict(extra="forbid")
    pattern: str = Field(min_length=1, max_length=500, description="Regular expression.")
    directory: str = Field(default=".", description="Directory to search, in the workspace.")
    glob: str = Field(default="*", description="Only files whose name matches this glob.")
    max_matches: int = Field(default=100, ge=1, le=1000)


class GrepTool(ModelArgumentsTool[GrepArguments]):
    """Search workspace files with a regular expression."""

    name: ClassVar[str] = "grep"
    description: ClassVar[str] = (
        "Search text files under a workspace directory for a regular expression; returns "
        "path:line:text for each match."
    )
    arguments_model: ClassVar[type[BaseModel]] = GrepArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> GrepTool:
        """No settings needed."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse a pattern RE2 cannot compile, or a directory outside the workspace."""
        args: GrepArguments = arguments["args"]
        try:
            compile_pattern(args.pattern)
        except ToolExecutionError as exc:
            return ToolAssessment(refusal=str(exc))
        return path_assessment(context, args.directory, Capability.READ, walks=True)

    async def execute(self, args: GrepArguments, context: ToolContext) -> str:
        """Matches, capped at ``max_matches``; stops at the time limit with what it found."""
        regex = compile_pattern(args.pattern)
        sandbox = sandbox_of(context, self.name)
        hits: list[str] = []
        deadline = time.monotonic() + GREP_TIME_LIMIT_S
        files, withheld = await walked_files(context, self.name, args.directory, MAX_LISTED)
        for relative in files:
            if not fnmatch.fnmatch(relative.name, args.glob):
                continue
            if time.monotonic() > deadline:
                hits.append(f"[... stopped after {GREP_TIME_LIMIT_S:g} s ...]")
                break
            path = Path(args.directory) / relative
            data, _ = await sandbox.read_bytes(path, max_bytes=MAX_READ_BYTES)
            if b"\x00" in data[:1024]:
                continue  # binary
            room = args.max_matches - len(hits)
            found = await anyio.to_thread.run_sync(_search, regex, data, str(path), room)
            hits.extend(found)
            if len(hits) >= args.max_matches:
                hits.append("[... more matches not shown ...]")
                break
        if withheld:
            return "\n".join(hits or ["(no matches)"]) + f"\n{withheld}"
        return "\n".join(hits) if hits else "(no matches)"


def _search(regex: Any, data: bytes, shown: str, limit: int) -> list[str]:
    """``path:line:text`` for the first ``limit`` matching lines (runs in a worker thread)."""
    hits: list[str] = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if regex.search(line):
            hits.append(f"{shown}:{number}:{line[:300]}")
            if len(hits) >= limit:
                break
    return hits
