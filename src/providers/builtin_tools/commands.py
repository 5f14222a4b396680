"""``run_command``: a shell command, judged sub-command by sub-command, run in the sandbox."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability, ToolContext
from providers.builtin_tools.files import sandbox_of
from providers.builtin_tools.model_tool import ModelArgumentsTool


class RunCommandArguments(BaseModel):
    """Arguments of ``run_command``."""

    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, max_length=4000, description="The shell command line.")
    timeout_s: float | None = Field(default=None, gt=0, le=600, description="Time limit.")


class RunCommandTool(ModelArgumentsTool[RunCommandArguments]):
    """Run an allowed shell command in the workspace."""

    name: ClassVar[str] = "run_command"
    description: ClassVar[str] = (
        "Run a shell command in the workspace directory and return its exit code and output. "
        "Only allowed commands run; every part of a pipeline or list must be allowed."
    )
    arguments_model: ClassVar[type[BaseModel]] = RunCommandArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.EXEC})

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> RunCommandTool:
        """No settings needed (limits live in the sandbox)."""
        return cls()

    async def execute(self, args: RunCommandArguments, context: ToolContext) -> str:
        """Exit code, stdout and stderr, with flags for cut output or a timeout."""
        result = await sandbox_of(context, self.name).run_command(
            args.command, timeout_s=args.timeout_s
        )
        notes = [
            n
            for n, on in (("output truncated", result.truncated), ("timed out", result.timed_out))
            if on
        ]
        head = f"exit code: {result.exit_code}" + (f" ({', '.join(notes)})" if notes else "")
        parts = [head]
        if result.stdout:
            parts.append(f"stdout:\n{result.stdout}")
        if result.stderr:
            parts.append(f"stderr:\n{result.stderr}")
        return "\n".join(parts)
