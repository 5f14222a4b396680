"""``glob``: find workspace files by a path pattern, through the sandbox.

The other tools of the pack are installed ones (``read_file``, ``grep``...); this is the one
they lack: ``list_files`` matches names with ``fnmatch``, where ``*`` also crosses folders and
``**/x`` misses a top-level ``x``. Patterns here follow ``.gitignore`` rules (pathspec), which
every developer knows: ``**/*.py``, ``src/**/test_*.py``, and ``*.md`` at any depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pathspec import GitIgnoreSpec
from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.errors import ToolExecutionError
from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability, ToolAssessment, ToolContext
from core_agent.contracts.walked_files import walked_files

MAX_SCANNED = 20_000
"""Files looked at, at most, per call (the sandbox lists them without following links)."""


class GlobArguments(BaseModel):
    """Arguments of ``glob``."""

    model_config = ConfigDict(extra="forbid")
    pattern: str = Field(
        min_length=1,
        max_length=500,
        description="Path pattern, as in .gitignore: '**/*.py', 'src/**/test_*.py'; a "
        "pattern without a slash matches at any depth ('*.md').",
    )
    directory: str = Field(default=".", description="Directory to search, in the workspace.")
    limit: int = Field(default=500, ge=1, le=2000, description="At most this many paths.")


def compile_glob(pattern: str) -> GitIgnoreSpec:
    """The pattern as a matcher; ``ToolExecutionError`` when it is not one."""
    if pattern.startswith("!"):
        raise ToolExecutionError(
            "a glob cannot start with '!': give the files to find", tool_name="glob"
        )
    try:
        return GitIgnoreSpec.from_lines([pattern])
    except (ValueError, TypeError) as exc:
        raise ToolExecutionError(f"invalid pattern {pattern!r}: {exc}", tool_name="glob") from exc


class GlobTool(ModelArgumentsTool[GlobArguments]):
    """List workspace files whose path matches a pattern."""

    name: ClassVar[str] = "glob"
    description: ClassVar[str] = (
        "Find files under a workspace directory whose relative path matches a pattern "
        "(.gitignore syntax: '**/*.py', 'src/**/test_*.py'); returns the paths, sorted."
    )
    arguments_model: ClassVar[type[BaseModel]] = GlobArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> GlobTool:
        """No settings needed."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Refuse a pattern that is not one, or a directory the sandbox would not list."""
        args: GlobArguments = arguments["args"]
        try:
            compile_glob(args.pattern)
        except ToolExecutionError as exc:
            return ToolAssessment(refusal=str(exc))
        if context.sandbox is None:
            return ToolAssessment(refusal="glob needs a sandbox and none is configured")
        verdict = context.sandbox.check_path(args.directory, Capability.READ)
        if not verdict.allowed:
            return ToolAssessment(refusal=verdict.reason)
        return ToolAssessment(paths=(f"{verdict.path}/",) if verdict.path is not None else ())

    async def execute(self, args: GlobArguments, context: ToolContext) -> str:
        """One path a line (relative to ``directory``), with a note when cut."""
        if context.sandbox is None:
            raise ToolExecutionError(
                "glob needs a sandbox and none is configured", tool_name=self.name
            )
        spec = compile_glob(args.pattern)
        files, withheld = await walked_files(context, self.name, args.directory, MAX_SCANNED)
        matches = sorted(str(path) for path in files if spec.match_file(path.as_posix()))
        notes = []
        if len(matches) > args.limit:
            notes.append(f"[... {len(matches) - args.limit} more paths not shown ...]")
        if len(files) >= MAX_SCANNED:
            notes.append(f"[... stopped after looking at {MAX_SCANNED} files ...]")
        if withheld:
            notes.append(withheld)
        shown = matches[: args.limit] or ["(no matching files)"]
        return "\n".join([*shown, *notes]) if matches or withheld else "(no matching files)"
