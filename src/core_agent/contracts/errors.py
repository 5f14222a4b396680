"""The kernel's error tree.

Misuse (a bug or a configuration mistake in the host, fixed by changing code or settings) is
kept apart from run failures (something went wrong while a task ran; the task records it and
fails, and the host may retry)::

    CoreAgentError
    ├── ApprovalPendingError            not a failure: the task waits, durably, for a human
    ├── SpanExportError                 a collector did not take exported spans
    ├── UsageError                      misuse: raised to the caller, never stored as a result
    │   ├── ConfigurationError          bad or missing settings
    │   │   ├── ProviderNotFoundError   no installed provider has that name
    │   │   ├── ExtraNotInstalledError  a provider needs an optional extra that is missing
    │   │   └── ModelNotConfiguredError no model to call
    │   ├── InvalidTransitionError      a task status change the state machine forbids
    │   ├── TaskNotFoundError           no task with that id
    │   ├── SessionNotFoundError        no session with that id
    │   ├── SessionBusyError            a task of the session has not ended yet
    │   ├── SessionClosedError          the session was closed: it takes no more tasks
    │   ├── ResponseModelError          a resumed task's response model is missing or differs
    │   ├── EmbeddingMismatchError      vectors of one model written or searched in another's
    │   ├── DataTooNewError             a database written by a newer core-agent: not opened
    │   └── ToolRegistrationError       a tool with a bad name, schema or a duplicate name
    └── RunError                        a run failure: the task ends ``failed`` with it
        ├── ModelError                  the model call failed (status and body kept)
        │   ├── ModelTimeoutError
        │   │   └── ModelDeadlineError  the call's overall deadline ran out (all attempts)
        │   ├── ModelRateLimitError
        │   ├── ModelAuthenticationError
        │   ├── ModelContextWindowError the prompt is longer than the model accepts
        │   ├── ModelIncompleteError    the answer was cut short or empty
        │   └── ModelCircuitOpenError   the model's circuit breaker is open: not called
        ├── ToolError                   a tool call could not produce a result
        │   ├── ToolNotFoundError       the model named a tool that is not available
        │   ├── ToolArgumentsError      arguments are not JSON or fail the tool's schema
        │   ├── ToolTimeoutError
        │   ├── ToolExecutionError      the tool itself raised
        │   ├── SandboxRefusedError     the sandbox would not let the call act
        │   ├── PolicyDeniedError       a policy rule forbids the call
        │   ├── ApprovalDeniedError     a human (or a timeout) said no
        │   └── ToolHookBlockedError    a host's tool hook blocked the call (or failed)
        ├── StorageError                a store could not read or write
        │   └── CorruptStateError       one task's stored state cannot be read
        ├── TurnLimitExceededError      the executor ran out of turns
        ├── RunStoppedError             the run ends here: no replan, fallback or question
        │   └── UsageLimitExceededError going on would pass a token, cost, tool-call or time limit
        ├── PlanningError               no valid plan within the retry bound
        ├── StructuredOutputError       the answer does not fit the requested model
        └── TaskFailedError             a task run for a typed result did not succeed

Code the kernel runs for a host (a tool, a workflow node, a team's aggregation) fails with
whatever it raises, ``SystemExit`` and other ``BaseException`` subclasses included: only an
interruption (``is_interruption``) stops the run instead.

Inside a ReAct loop a ``ToolError`` is shown to the model as the tool's result (it may correct
itself); it only fails the task when it escapes an executor. Adapters map vendor exceptions to
this tree with ``raise ...Error(...) from exc`` so no vendor type crosses a port.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pydantic import ValidationError

    from shared.agent_protocol import ApprovalRequest, TaskResult, TokenUsage


class CoreAgentError(Exception):
    """Root of every error the kernel and its adapters raise on purpose."""


class ApprovalPendingError(CoreAgentError):
    """A run stops here until a human decides on ``requests``.

    The task is suspended, not failed. Executors raise it after saving what they need to
    resume.
    """

    def __init__(self, requests: Sequence[ApprovalRequest]) -> None:
        self.requests = list(requests)
        ids = ", ".join(r.request_id for r in self.requests)
        super().__init__(f"waiting for a human decision on request(s) {ids}")


class UsageError(CoreAgentError):
    """The caller used the kernel wrongly; fix the code or the configuration."""


class ConfigurationError(UsageError):
    """Settings are missing, malformed or contradict each other."""


class ProviderNotFoundError(ConfigurationError):
    """No installed provider is registered under the requested name."""

    def __init__(self, group: str, name: str, installed: list[str]) -> None:
        self.group = group
        self.name = name
        self.installed = sorted(installed)
        names = ", ".join(self.installed) or "none"
        super().__init__(
            f"no provider named {name!r} in entry-point group {group!r}; installed: {names}"
        )


class ExtraNotInstalledError(ConfigurationError):
    """A provider needs the packages of an optional extra that is not installed."""

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs: pip install 'core-agent[{extra}]'")


class SpanExportError(CoreAgentError):
    """A collector refused exported spans or could not be reached; the local trace is whole."""


class ModelNotConfiguredError(ConfigurationError):
    """A model is needed but none is configured."""


class InvalidTransitionError(UsageError):
    """A task status change that the state machine does not allow."""

    def __init__(self, task_id: str, current: str, requested: str) -> None:
        self.task_id = task_id
        self.current = current
        self.requested = requested
        if current in ("succeeded", "failed", "canceled"):
            message = f"task {task_id} has already ended ({current}); it cannot become {requested}"
        else:
            message = f"task {task_id}: cannot move from {current!r} to {requested!r}"
        super().__init__(message)


class TaskHeldError(UsageError):
    """Another live process runs the task (it holds its lease), so this one may not act on it.

    Attributes:
        task_id: The task.
        owner: The process that holds it.
    """

    def __init__(self, task_id: str, owner: str, doing: str) -> None:
        self.task_id = task_id
        self.owner = owner
        super().__init__(f"task {task_id} is held by the live process {owner}: {doing}")


class LeaseLostError(UsageError):
    """This kernel no longer holds the task it was running.

    Another kernel took it over (its lease ran out while this process stalled), or it ended
    meanwhile. Nothing of the write that found it out was stored.

    Attributes:
        task_id: The task.
        owner: Who holds it now (``None``: nobody, it ended or waits).
    """

    def __init__(self, task_id: str, owner: str | None) -> None:
        self.task_id = task_id
        self.owner = owner
        holder = f"the process {owner} holds it now" if owner else "it is no longer running here"
        super().__init__(f"task {task_id} was taken from this kernel ({holder}): nothing written")


class TaskNotFoundError(UsageError):
    """No task has the given id."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task with id {task_id!r}")


class SessionNotFoundError(UsageError):
    """No session has the given id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session with id {session_id!r}")


class SessionBusyError(UsageError):
    """A session runs one task at a time, and one of its tasks has not ended yet.

    Attributes:
        session_id: The session.
        task_id: The task that holds it (queued, running, or waiting for a human).
        status: That task's status.
    """

    def __init__(self, session_id: str, task_id: str, status: str, doing: str) -> None:
        self.session_id = session_id
        self.task_id = task_id
        self.status = status
        super().__init__(
            f"session {session_id!r} is busy: its task {task_id} is {status}; {doing} once "
            f"that task has ended (or cancel it: core-agent cancel {task_id})"
        )


class SessionClosedError(UsageError):
    """The session was closed: its history can be read, but it takes no more tasks."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} is closed: start a new session instead")


class ResponseModelError(UsageError):
    """A task started with a response model cannot be carried on with the one at hand.

    None was given (and this process knows none of that name and schema), or the one given
    does not have the JSON Schema the task was started with. Nothing was recorded.

    Attributes:
        task_id: The task.
        expected: The name (``module:qualname``) the task was started with, if any.
    """

    def __init__(self, task_id: str, expected: str | None, message: str) -> None:
        self.task_id = task_id
        self.expected = expected
        super().__init__(message)


class DefinitionNotLoadedError(UsageError):
    """A task runs code this process has not loaded (a workflow registered by name).

    The task is left as it is, for a process that has the definition (``recover`` logs it and
    moves on). Nothing was recorded.
    """


class EmbeddingMismatchError(UsageError):
    """A vector collection was used with another embedding model or dimension than its own."""

    def __init__(
        self,
        namespace: str,
        *,
        stored_model: str,
        stored_dimension: int,
        model: str,
        dimension: int,
    ) -> None:
        self.namespace = namespace
        self.stored_model = stored_model
        self.stored_dimension = stored_dimension
        self.model = model
        self.dimension = dimension
        super().__init__(
            f"vector namespace {namespace!r} holds {stored_dimension}-dimensional vectors of "
            f"{stored_model!r}; got {dimension}-dimensional vectors of {model!r}. Use the same "
            f"embedder, or rebuild the namespace with `core-agent vectors reembed {namespace}`"
        )


class DataTooNewError(UsageError):
    """A database's schema is newer than this build knows: it is refused before any write.

    A newer core-agent wrote it (its migrations ran past ours); writing it with this build's
    idea of the tables could break what that one relies on. The fix is the person's: upgrade
    core-agent, or point ``AGENT_DATA_DIR`` at another folder.

    Attributes:
        path: The database file.
        version: Its schema version.
        supported: The highest schema version this build knows.
    """

    def __init__(self, path: str, version: int, supported: int) -> None:
        self.path, self.version, self.supported = path, version, supported
        super().__init__(
            f"the database {path} has schema version {version}, newer than this core-agent "
            f"supports (up to {supported}): it was written by a newer core-agent. Upgrade "
            "core-agent, or set AGENT_DATA_DIR to another folder"
        )


class ToolRegistrationError(UsageError):
    """A tool cannot be registered: bad name, bad schema, or its name is taken."""


class KernelClosedError(UsageError):
    """The kernel handle was closed: no call starts, and a call it stopped raises this."""


class RunError(CoreAgentError):
    """A failure while a task runs; the task ends ``failed`` with this error."""


class ModelError(RunError):
    """The model call failed.

    Attributes:
        status_code: HTTP status of the provider's answer, when there was one.
        body: The provider's error body or message, for diagnosis.
        retryable: Whether the same call may succeed later; the kernel retries only these.
        retry_after_s: How long the provider asked to wait before trying again (its
            ``Retry-After`` header), when it said; a value that is no number of seconds
            (NaN, which a gateway may have parsed from "nan") is taken as unsaid.
        usage: What the failed call still cost, when the provider answered and counted
            tokens for an answer that could not be used (empty, all thinking, filtered, tool
            arguments cut); for a call tried several times, all its tries'. ``None`` when
            nothing was counted.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        body: str | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
        usage: TokenUsage | None = None,
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.retryable = retryable
        # NaN compares false with everything: min/max caps and waits would pass it through.
        self.retry_after_s = retry_after_s if retry_after_s == retry_after_s else None
        self.usage = usage
        super().__init__(message)


class ModelTimeoutError(ModelError):
    """The model did not answer in time."""


class ModelDeadlineError(ModelTimeoutError):
    """The call's overall deadline (``AGENT_MODEL_CALL_DEADLINE_S``) ran out.

    Raised when an attempt is still running at the deadline, or when the wait before the next
    attempt (a provider's ``Retry-After``, say) would end past it. Never retried: the time the
    call was given is spent.
    """


class ModelRateLimitError(ModelError):
    """The provider refused the call for rate or quota reasons."""


class ModelAuthenticationError(ModelError):
    """The provider refused the credentials."""


class ModelContextWindowError(ModelError):
    """The prompt is longer than the model's context window.

    Not retryable as such: the same prompt fails again. The ReAct loop sends fewer of the
    conversation's turns and tries once more.
    """


class ModelIncompleteError(ModelError):
    """The provider's answer was cut short or empty.

    A stream that ended without a finish reason, a completion with neither text nor tool
    calls, or tool-call arguments cut off by the token limit: retryable, a transport or
    provider fault, not an answer. Not retryable when the same request would be cut again:
    an answer the provider's content filter stopped, a refusal (the model's words are the
    ``body``), or a text answer the output token limit kept cutting off after the model was
    asked to go on with it.
    """


class ModelCircuitOpenError(ModelError):
    """The model failed repeatedly, so its circuit breaker is open and it was not called.

    Attributes:
        model: The model whose breaker is open.
        retry_in_s: Seconds until the breaker lets one trial call through (0 when a trial
            call is already under way).
    """

    def __init__(self, model: str, *, retry_in_s: float) -> None:
        self.model = model
        self.retry_in_s = retry_in_s
        super().__init__(
            f"model {model!r} is failing: its circuit breaker is open, so it was not called "
            f"(a trial call is allowed in {retry_in_s:.1f} s)"
        )


class ToolError(RunError):
    """A tool call could not produce a result."""

    def __init__(self, message: str, *, tool_name: str) -> None:
        self.tool_name = tool_name
        super().__init__(message)


class ToolNotFoundError(ToolError):
    """The requested tool is not registered or not allowed for this task."""


class ToolArgumentsError(ToolError):
    """The arguments are not a JSON object or do not satisfy the tool's schema."""

    @classmethod
    def from_validation_error(cls, tool_name: str, exc: ValidationError) -> ToolArgumentsError:
        """A message that tells the model which argument is wrong and how."""
        problems = validation_problems(exc, root="(arguments)")
        return cls(f"invalid arguments for tool {tool_name!r}: {problems}", tool_name=tool_name)


class ToolTimeoutError(ToolError):
    """The tool did not finish within its time limit."""


class ToolExecutionError(ToolError):
    """The tool raised while running."""


class SandboxRefusedError(ToolError):
    """The sandbox refused an operation (path, command or URL); ``reason`` says why."""

    def __init__(self, reason: str, *, tool_name: str = "") -> None:
        self.reason = reason
        super().__init__(f"refused by the sandbox: {reason}", tool_name=tool_name)


class ConfinementUnavailableError(SandboxRefusedError):
    """The operating system cannot confine a command here, so it is not run.

    The reason says what is missing and how to opt out explicitly.
    """


class PolicyDeniedError(ToolError):
    """A deny rule matched the call; ``rule`` names it."""

    def __init__(self, message: str, *, tool_name: str, rule: str) -> None:
        self.rule = rule
        super().__init__(message, tool_name=tool_name)


class ApprovalDeniedError(ToolError):
    """The call needed a human's approval and did not get it.

    Denied, timed out, no approver connected, or the arguments changed after approval.
    """


class RedactedArgumentsError(ToolError):
    """A call read back from the stores holds ``[REDACTED]`` where a secret was: not run.

    The stores keep arguments redacted, so a call carried on from them (a resumed or forked
    turn, a recorded model answer run against live tools) would hand the tool the placeholder
    instead of the secret. ``places`` names where in the arguments the mark is.
    """

    def __init__(self, message: str, *, tool_name: str, places: tuple[str, ...]) -> None:
        self.places = places
        super().__init__(message, tool_name=tool_name)


class ToolHookBlockedError(ToolError):
    """A tool hook the host registered blocked the call, or failed (hooks fail closed)."""

    def __init__(self, message: str, *, tool_name: str, hook: str) -> None:
        self.hook = hook
        super().__init__(message, tool_name=tool_name)


class StorageError(RunError):
    """A store could not read or write; nothing partial was committed."""


class CorruptStateError(StorageError):
    """What is stored for one task (a checkpoint, an event, a message) cannot be read.

    Only that task is affected: the error names it and what is wrong, and others go on.

    Attributes:
        task_id: The task whose stored state is damaged.
    """

    def __init__(self, task_id: str, message: str) -> None:
        self.task_id = task_id
        super().__init__(f"the stored state of task {task_id} is unreadable: {message}")


class CorruptSessionError(StorageError):
    """What is stored for one session (its record, its history, a summary) cannot be read.

    Only that session is affected: listings leave it out, and its tasks fail saying so.

    Attributes:
        session_id: The session whose stored state is damaged.
    """

    def __init__(self, session_id: str, message: str) -> None:
        self.session_id = session_id
        super().__init__(f"the stored history of session {session_id} is unreadable: {message}")


class TurnLimitExceededError(RunError):
    """The executor used all its turns without reaching an answer."""


class RunStoppedError(RunError):
    """The run must end here, failed: no strategy tries to recover from it.

    Where other run failures lead to a replan, a fallback strategy or a question for a human,
    this one goes straight through every executor to the task's end (``failed``, with this
    error): the reason it was raised (a spent budget, a replay that no longer follows its
    recording) holds for anything the run could try next.
    """


class UsageLimitExceededError(RunStoppedError):
    """Going on would pass one of the task's (or its session's) usage limits.

    ``limit`` names it (``input_tokens``, ``output_tokens``, ``total_tokens``, ``cost_usd``,
    ``tool_calls``, ``wall_time_s``), ``scope`` says whose (``task`` or ``session``; for a
    nested agent's task, also an ancestor's that it shares with its siblings: ``parent task
    <id>``, ``ancestor task <id>``, ``session of parent task <id>``...), ``used`` is what was
    used when the run stopped and ``maximum`` the limit.
    """

    def __init__(
        self, message: str, *, limit: str, scope: str, used: float, maximum: float
    ) -> None:
        self.limit = limit
        self.scope = scope
        self.used = used
        self.maximum = maximum
        super().__init__(message)


class PlanningError(RunError):
    """The planner produced no valid plan; ``attempts`` holds why each try was refused."""

    def __init__(self, message: str, *, attempts: list[str] | None = None) -> None:
        self.attempts = list(attempts or [])
        super().__init__(message)


class StructuredOutputError(RunError):
    """The model's answer does not fit the requested model, even after repair.

    Raised after JSON repair and one self-correction round; both the raw text and the
    validation error are kept.
    """

    def __init__(self, message: str, *, raw_text: str, validation_error: str) -> None:
        self.raw_text = raw_text
        self.validation_error = validation_error
        super().__init__(message)


class TaskFailedError(RunError):
    """A task run for a typed result did not succeed.

    Raised by ``execute_task(..., response_model=...)``; ``result`` is the task's result
    (its ``status``, ``error``, ``output``, and ``pending_approval`` when it waits).
    """

    def __init__(self, result: TaskResult, message: str) -> None:
        self.result = result
        super().__init__(message)


def is_interruption(exc: BaseException) -> bool:
    """Whether ``exc`` stops the run rather than fails the code it came out of.

    Call it where the code's exception arrives, in the task that ran the code and before any
    shielded scope (under a shield every cancel looks withdrawn). Two things are
    interruptions, alone or in an exception group: ``KeyboardInterrupt`` (Python delivers
    Ctrl-C into whatever code runs, a tool's or a node's included, and the person meant the
    host), and the runtime's cancellation (anyio's cancelled exception, whatever the backend)
    when the run really was canceled: a cancel scope around it was canceled (a cancel of the
    task, a time limit, the caller gone) or, on asyncio, the task was asked to stop. A
    ``CancelledError`` the code raised on its own (it awaited a future something else
    canceled) is its failure like anything else, and so is a group mixing one with a
    ``SystemExit``: taken for a cancel, it ended the task canceled with a false reason and
    reached the host as a cancel. Anything else that comes out of a tool, a workflow node or
    a team's aggregation is that code's failure, recorded as such: ``SystemExit``
    (``sys.exit`` in a script turned tool), a ``GeneratorExit`` it raised, a custom
    ``BaseException``. anyio never cancels with ``GeneratorExit``, so one coming out of an
    awaited call was raised by the code itself; code run in a worker thread must hand its
    ``GeneratorExit`` back wrapped (``function_tool``): thrown into the awaiting task, it
    would close every coroutine that task awaits through, past any handler. On asyncio a
    child task's ``KeyboardInterrupt`` leaves the event loop at once and never arrives in a
    group; on trio it does.
    """
    if keyboard_interrupt_in(exc) is not None:
        return True
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        if exc.subgroup(lambda one: isinstance(one, cancelled)) is None:
            return False
    elif not isinstance(exc, cancelled):
        return False
    return _cancel_requested()


def keyboard_interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` that ``exc`` is or holds (in a group, however nested).

    A group's own ``except KeyboardInterrupt`` in the host never matches: whoever passes an
    interruption on to the host raises this one instead.
    """
    if isinstance(exc, KeyboardInterrupt):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for one in exc.exceptions:
            if (found := keyboard_interrupt_in(one)) is not None:
                return found
    return None


def _cancel_requested() -> bool:
    """Whether the current task's run was asked to stop.

    A cancel scope around it (up to the nearest shield) was canceled, or on asyncio a
    ``Task.cancel`` was not withdrawn.
    """
    try:
        if anyio.current_effective_deadline() == -math.inf:
            return True
    except RuntimeError:  # no event loop runs: nothing can have canceled anything
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # another backend (trio): its cancel scopes answered above
        return False
    return task is not None and task.cancelling() > 0


def described(exc: BaseException) -> str:
    """``exc``'s type and message, for a user reading why something failed.

    Just its type when it has no message (``GeneratorExit()``). A group (a task group's
    failures, an ``ExceptionGroup`` a host's code raised) is described by what it holds,
    however nested, not as "(2 sub-exceptions)".
    """
    if isinstance(exc, BaseExceptionGroup):
        leaves = list(exception_leaves(exc))
        shown = "; ".join(described(leaf) for leaf in leaves[:_LEAVES_SHOWN])
        more = f"; and {len(leaves) - _LEAVES_SHOWN} more" if len(leaves) > _LEAVES_SHOWN else ""
        return f"{type(exc).__name__}: {exc.message} ({shown}{more})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


_LEAVES_SHOWN = 5


def exception_leaves(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` itself, or the exceptions its group holds, however nested."""
    if isinstance(exc, BaseExceptionGroup):
        for one in exc.exceptions:
            yield from exception_leaves(one)
    else:
        yield exc


def validation_problems(exc: ValidationError, *, root: str = "(root)") -> str:
    """Where a value failed its model and why, without the values themselves.

    ``str(exc)`` shows each input, cut by pydantic to its first and last characters: a
    secret in one would reach whatever keeps the message in two pieces that no redaction
    recognises. ``root`` names a failure of the value as a whole.
    """
    return "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or root}: {err['msg']}"
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    )
