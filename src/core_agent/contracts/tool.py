"""Port for one tool the model can call."""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core_agent.contracts.tool_sandbox import IToolSandbox

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Names that every chat-completions provider accepts."""


class Capability(StrEnum):
    """What a tool may do to the world; the policy engine grades calls by it."""

    READ = "read"
    WRITE = "write"
    EXEC = "exec"
    NETWORK = "network"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """How a tool presents itself: to the model (name, description, schema) and to policy."""

    name: str
    description: str
    parameters: dict[str, Any]
    capabilities: frozenset[Capability] = frozenset()
    idempotent: bool = False
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling, and the sandbox the call must act through."""

    task_id: str
    session_id: str
    call_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sandbox: IToolSandbox | None = None
    """Tools that touch files, run commands or use the network do it through this."""


class ITool(abc.ABC):
    """A callable capability with a JSON-Schema signature.

    The runner always calls ``validate_arguments`` first and passes only its result to
    ``invoke``, so ``invoke`` never sees unvalidated input.
    """

    @property
    @abc.abstractmethod
    def spec(self) -> ToolSpec:
        """Name, description, argument schema, capabilities and idempotency. Constant."""

    @abc.abstractmethod
    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """Check and coerce raw arguments against the tool's schema. Never blocks.

        Args:
            arguments: The JSON object the model sent.

        Returns:
            The arguments to pass to ``invoke`` (defaults filled in, types coerced).

        Raises:
            ToolArgumentsError: With a message that tells the model what to fix.
        """

    @abc.abstractmethod
    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run the tool on validated arguments.

        Args:
            arguments: The value ``validate_arguments`` returned.
            context: The task and call this invocation belongs to.

        Returns:
            The result as text for the model (JSON text for structured results).

        Raises:
            ToolExecutionError: The tool could not do its job; the message is for the model.
            Any other exception is treated the same way by the runner. Blocking work must be
            moved off the event loop by the tool itself.
        """
