"""``run_command``: a shell command, judged by the sandbox and run under the OS's confinement."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability, ToolAssessment, ToolContext
from providers.builtin_tools.files import sandbox_of
from shared.agent_protocol import RiskLevel


class RunCommandArguments(BaseModel):
    """Arguments of ``run_command``."""

    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, max_length=4000, description="The shell command line.")
    timeout_s: float | None = Field(default=None, gt=0, le=600, description="Time limit.")


class RunCommandTool(ModelArgumentsTool[RunCommandArguments]):
    """Run a shell command in the workspace."""

    name: ClassVar[str] = "run_command"
    description: ClassVar[str] = (
        "Run a shell command in the workspace directory and return its exit code and output. "
        "Read-only commands on the allowlist run at once; anything else waits for a human's "
        "approval. Commands cannot reach the network, and can change files only in the "
        "workspace (never .git) and only when approved."
    )
    arguments_model: ClassVar[type[BaseModel]] = RunCommandArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.EXEC})

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> RunCommandTool:
        """No settings needed (limits live in the sandbox)."""
        return cls()

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """The sandbox's judgement of the line.

        Low risk when proven read-only, medium when it only adds workspace writes, unproven
        (a human decides) otherwise.
        """
        if context.sandbox is None:
            return ToolAssessment(refusal="run_command needs a sandbox and none is configured")
        args: RunCommandArguments = arguments["args"]
        verdict = context.sandbox.assess_command(args.command)
        risk = RiskLevel.MEDIUM if verdict.writes else RiskLevel.LOW
        return ToolAssessment(
            refusal=verdict.refusal,
            unproven=verdict.unproven,
            risk=risk if verdict.allowed else RiskLevel.HIGH,
            writes=verdict.writes,
            paths=verdict.paths,
            details={"programs": list(verdict.programs)},
        )

    async def execute(self, args: RunCommandArguments, context: ToolContext) -> str:
        """Exit code, stdout and stderr, flags for cut output or a timeout, and warnings."""
        result = await sandbox_of(context, self.name).run_command(
            args.command, timeout_s=args.timeout_s, permit=context.permit
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
        parts.extend(f"warning: {warning}" for warning in result.warnings)
        return "\n".join(parts)
