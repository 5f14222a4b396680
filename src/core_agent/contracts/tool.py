"""Port for one tool the model can call."""

from __future__ import annotations

import abc
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from shared.agent_protocol import RiskLevel

if TYPE_CHECKING:
    from core_agent.contracts.tool_sandbox import IToolSandbox

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Names that every chat-completions provider accepts."""

DepsT = TypeVar("DepsT", default=Any)
"""The type of the host's dependencies a tool receives (``ToolContext.deps``)."""
_NO_DEPS: Any = None  # typed Any so it can default a field of any DepsT


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
    resumable: bool = False
    """Invoked again with the same idempotency key, the tool carries on its first invocation
    instead of repeating it (a nested agent resumes or reuses its child task), so a call cut
    by a crash may be run again without asking a human."""


@dataclass(frozen=True, slots=True)
class WithheldFile:
    """Why a walk leaves one file out (``CallPermit.withheld``)."""

    denied: bool
    """A policy rule denies the file (the walk counts it, without naming it); otherwise
    reading it needs a human's approval (the walk names it, to be asked for alone)."""
    reason: str


@dataclass(frozen=True, slots=True)
class CallPermit:
    """What the policy lets one call do beyond reading, decided before it runs.

    The sandbox enforces it: a command without ``write`` cannot change the workspace, one
    without ``network`` cannot open a connection, whatever the command line says.
    """

    write: bool = False
    """May change files in the workspace (a human approved the call, or it was judged a
    workspace write below the approval threshold)."""
    network: bool = False
    """May open network connections (a policy rule allows it for this call)."""
    approved: bool = False
    """A human approved this call (or a standing grant covers it)."""
    withheld: Callable[[str], WithheldFile | None] | None = None
    """For a call that walks directories: why a file it comes across (a workspace path, as
    ``SandboxVerdict.path`` gives it) is kept from it, or ``None``. A policy rule denies that
    file, or grades reading it higher than the call and at the approval threshold (the
    ``.env`` a ``grep`` over the workspace would read); walking tools skip such files and say
    so."""


@dataclass(frozen=True, slots=True)
class ToolAssessment:
    """A tool's own static judgement of a call, made before it runs (``ITool.assess``).

    ``refusal``: the tool would refuse the call (the reason is for the model); it is not
    run and no human is asked. ``unproven``: why the call cannot be shown harmless (for a
    command: a construct or program the parser cannot vouch for); the call then needs a
    human's approval whatever the rules say. ``risk``: the risk the tool itself gives the
    call, used when no policy rule grades it. ``writes``: the call changes files.
    ``paths``: the workspace paths the call reads or writes, as the sandbox resolves them
    (``SandboxVerdict.path``); a directory whose files the call walks ends with ``/``. Policy
    path rules grade the call by these rather than by how its arguments spell them.
    """

    refusal: str | None = None
    unproven: tuple[str, ...] = ()
    risk: RiskLevel | None = None
    writes: bool = False
    paths: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class UninterruptibleWork:
    """How a tool whose work cannot be stopped (a Python function in a thread) reports it.

    When the kernel stops waiting (time limit, cancel) while that work goes on, the tool
    waits up to ``grace_s`` more for it. ``outcome`` then describes how it ended (its result
    or error, as text), or stays ``None`` while it still runs; a tool calls ``report_late``
    from its worker when such work ends later, so the kernel can record that too.
    """

    grace_s: float = 5.0
    outcome: str | None = None
    still_running: bool = False
    report_late: Callable[[str], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


# No slots: with them, ``ToolContext[MyDeps](...)`` fails (typing's ``__orig_class__`` write
# reaches the frozen ``__setattr__`` of the slotted copy of the class, which raises TypeError).
@dataclass(frozen=True)
class ToolContext(Generic[DepsT]):
    """Who is calling, the sandbox the call must act through, and what it may do.

    ``ToolContext[MyDeps]`` types ``deps``: an ``@tool`` function with a parameter annotated
    so receives the context there (that parameter is not shown to the model).
    """

    task_id: str
    session_id: str
    call_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sandbox: IToolSandbox | None = None
    """Tools that touch files, run commands or use the network do it through this."""
    permit: CallPermit = field(default_factory=CallPermit)
    """What the policy decided this call may do (commands run within it)."""
    tainted: bool = False
    """Untrusted content is in the task's context; what the call stores carries that mark."""
    idempotency_key: str | None = None
    """The same for every attempt at this call, in every process that resumes the task
    (see the tool-call ledger): pass it to services that deduplicate requests."""
    work: UninterruptibleWork = field(default_factory=UninterruptibleWork)
    """Where a tool reports work that outlives the kernel's wait (see the class)."""
    span_id: str | None = None
    """The span timing this call in the task's trace (a nested agent's task links to it)."""
    deps: DepsT = _NO_DEPS
    """What the host passed as ``create_kernel(deps=...)``: its own objects (a database
    handle, the document open in the window), ``None`` when it passed nothing. Process-local:
    never stored in a checkpoint, so a task resumed in another process gets that process's
    deps."""


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

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """Judge validated arguments without running anything: pure, fast, never blocks.

        The kernel calls it before the policy decides (and ``core-agent policy check`` does
        too), so a call the tool would refuse is refused up front, and a call the tool cannot
        vouch for goes to a human. The default has no opinion.
        """
        return ToolAssessment()

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
