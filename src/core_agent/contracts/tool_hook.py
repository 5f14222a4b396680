"""Tool hooks: a host's own code before and after every tool call a task makes.

A hook can block a call (the model is told the hook's reason), rewrite its arguments, or
observe what calls returned: an audit log, a quota, a redaction, a house rule too specific
for the policy file. Register hooks with ``AgentKernel.add_tool_hook`` or
``create_kernel(tool_hooks=[...])``; they run in the order registered.

Where they run, for each call: the arguments are validated against the tool's schema, then
every ``before_call`` runs (a rewrite is validated again before the next hook sees it), then
the policy grades the call as it now is and asks a human when it must. A rewrite therefore
never gets past the policy: a safe call rewritten into a risky one is graded risky. A hook
that raises blocks the call (hooks fail closed); an ``after_call`` that raises is logged and
recorded and the task goes on.

A hook's methods may be plain or ``async``; a plain one runs on the event loop, so it must be
quick (do slow work in an ``async`` one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shared.agent_protocol import ToolCall, ToolResult


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """What a ``before_call`` decides: let the call go on, block it, or change its arguments."""

    action: Literal["allow", "block", "rewrite"] = "allow"
    reason: str = ""
    """Why (shown to the model when blocked; recorded for a rewrite)."""
    arguments: Mapping[str, Any] | None = None
    """With ``rewrite``: the complete new arguments."""

    @classmethod
    def allow(cls) -> HookVerdict:
        """The call goes on unchanged (returning ``None`` means the same)."""
        return cls()

    @classmethod
    def block(cls, reason: str) -> HookVerdict:
        """The call does not run; the model gets an error result with ``reason``."""
        return cls(action="block", reason=reason)

    @classmethod
    def rewrite(cls, arguments: Mapping[str, Any], reason: str = "") -> HookVerdict:
        """The call goes on with ``arguments`` instead (validated, then graded by the policy)."""
        return cls(action="rewrite", reason=reason, arguments=dict(arguments))


@dataclass(frozen=True, slots=True)
class ToolHookContext:
    """The task a call belongs to, as a hook sees it."""

    task_id: str
    session_id: str
    call_id: str
    tainted: bool
    """Whether untrusted content had entered the task when the call was made."""
    reused: bool = False
    """For ``after_call``: the result was recorded by an earlier run of the task (before a
    restart or a wait for a human) and handed back without running the call again; the hooks
    of that run may or may not have seen it already."""


BeforeToolCall = Callable[
    [ToolCall, ToolHookContext], HookVerdict | Awaitable[HookVerdict | None] | None
]
"""A ``before_call`` as a plain function (see ``tool_hook``)."""

AfterToolCall = Callable[[ToolCall, ToolResult, ToolHookContext], Awaitable[None] | None]
"""An ``after_call`` as a plain function (see ``tool_hook``)."""


class ToolHook:
    """Code a host runs around tool calls; override either method (plain or ``async``).

    The defaults allow every call and observe nothing. ``name`` identifies the hook in
    events, spans and the messages the model reads (the class name by default).
    """

    name: str = ""

    def hook_name(self) -> str:
        """``name``, or the class name when it is empty."""
        return self.name or type(self).__name__

    def before_call(
        self, call: ToolCall, context: ToolHookContext
    ) -> HookVerdict | Awaitable[HookVerdict | None] | None:
        """Decide on ``call`` (its arguments already fit the tool's schema) before it is graded.

        Return ``None`` or ``HookVerdict.allow()`` to let it go on, ``HookVerdict.block``
        to refuse it, ``HookVerdict.rewrite`` to change its arguments (later hooks see the
        rewritten call). Raising blocks the call, with the exception in the reason. Not
        called for a call whose result an earlier run recorded (it does not run again).
        """
        return None

    def after_call(
        self, call: ToolCall, result: ToolResult, context: ToolHookContext
    ) -> Awaitable[None] | None:
        """Observe the result of ``call`` (as rewritten), errors and refusals included.

        Called for every result the tool runner gives back, before the kernel truncates it
        or marks it as untrusted for the model; with ``context.reused`` for a result an
        earlier run recorded. Not called for a call that waits for a human (it is called
        when the call ends, after the decision), nor for a repeated call the loop refuses
        without running it. Raising is logged and recorded; the task goes on.
        """
        return None


class _FunctionHook(ToolHook):
    def __init__(
        self, before: BeforeToolCall | None, after: AfterToolCall | None, name: str
    ) -> None:
        self._before = before
        self._after = after
        self.name = name

    def before_call(
        self, call: ToolCall, context: ToolHookContext
    ) -> HookVerdict | Awaitable[HookVerdict | None] | None:
        return self._before(call, context) if self._before is not None else None

    def after_call(
        self, call: ToolCall, result: ToolResult, context: ToolHookContext
    ) -> Awaitable[None] | None:
        return self._after(call, result, context) if self._after is not None else None


def tool_hook(
    *,
    before: BeforeToolCall | None = None,
    after: AfterToolCall | None = None,
    name: str = "",
) -> ToolHook:
    """A ``ToolHook`` made of plain or ``async`` functions (either may be left out)."""
    fallback = getattr(before or after, "__name__", "") or "tool_hook"
    return _FunctionHook(before, after, name or fallback)
