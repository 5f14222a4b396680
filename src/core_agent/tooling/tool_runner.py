"""Running one tool call: look-up, argument validation, the ledger, time limit, errors.

Whatever goes wrong becomes a ``ToolResult`` with ``is_error=True`` and a message written for
the model, so a bad call never crashes the task; the model reads the error and may correct
itself.

With a ledger (``CallLedger``), the intent of a call is recorded before it runs and its result
after; a call an earlier process finished is answered from the ledger, and one that started
but left no result runs again only when that is harmless or a human says so. A tool whose
work cannot be interrupted (a Python function in a thread) is waited for a little after its
time limit or a cancel; the ledger records what it did after the cut, or that it was still
running (and later, when it ended).
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel

from core_agent.contracts.errors import (
    ToolArgumentsError,
    ToolError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
    is_interruption,
)
from core_agent.contracts.text_cuts import SecretSpans, head_of
from core_agent.contracts.tool import CallPermit, ITool, ToolContext, UninterruptibleWork
from core_agent.contracts.tool_call_ledger import LedgerEntry, LedgerStatus
from core_agent.contracts.tool_registry import IToolRegistry
from shared.agent_protocol import ToolCall, ToolResult

log = logging.getLogger(__name__)

ToolGate = Callable[
    [ToolCall, ITool, Mapping[str, Any], Mapping[str, Any], ToolContext, bool],
    Awaitable[CallPermit],
]
"""Checks run between validation and execution (judgement, approval): called with the call
(as the hooks left it), the tool, its arguments, the validated ones, the call's context, and
whether a human already approved running it (``preapproved``); returns the call's permit or
raises a ``ToolError`` to stop it."""

ConfirmRerun = Callable[
    [ToolCall, ITool, Mapping[str, Any], Mapping[str, Any], ToolContext, LedgerEntry],
    Awaitable[None],
]
"""Asks a human whether a call that may or may not have acted should run again; returns when
they approve, raises a ``ToolError`` when they do not (``ApprovalPendingError`` to wait)."""

BeforeHooks = Callable[
    [ToolCall, ITool, Mapping[str, Any]], Awaitable[tuple[ToolCall, Mapping[str, Any]]]
]
"""The host's hooks before a validated call: called with the call, the tool and the validated
arguments; returns the call to go on with and its validated arguments (rewritten or not), or
raises a ``ToolError`` to block it."""

Screen = Callable[[ToolCall, Mapping[str, Any]], None]
"""A check of the call as the caller got it (name and arguments), made before anything else
acts on it (the host's hooks, a human asked to confirm a rerun, the gate) and only when it is
to run (not when its result is reused from the ledger); raises a ``ToolError`` to refuse it."""

ObserveResult = Callable[[ToolCall, ToolResult, bool], Awaitable[None]]
"""The host's hooks after a call: called with the call (as rewritten), the result, and whether
the result was reused from the ledger; never raises."""

_RAW_ARGUMENTS_SHOWN = 200
"""How much of unparsable arguments to quote back to the model."""


class CallLedger(Protocol):
    """The ledger as a loop uses it (``orchestration.call_ledger.LedgeredCalls``)."""

    def recorded(self, call: ToolCall) -> LedgerEntry | None:
        """What an earlier process recorded for this call."""

    def reruns_safely(
        self, tool: ITool, arguments: Mapping[str, Any], context: ToolContext
    ) -> bool:
        """Whether running the call again can repeat no effect."""

    async def begin(
        self, call: ToolCall, tool: ITool, arguments: Mapping[str, Any], *, idempotent: bool
    ) -> str:
        """Record the intent; returns the idempotency key."""

    async def finish(
        self, key: str, result: ToolResult, *, status: LedgerStatus = "finished", note: str = ""
    ) -> None:
        """Record how the call ended."""


class ToolRunner:
    """Executes tool calls against a registry with a default time limit."""

    def __init__(
        self,
        registry: IToolRegistry,
        *,
        default_timeout_s: float,
        secret_spans: SecretSpans | None = None,
    ) -> None:
        self._registry = registry
        self._default_timeout_s = default_timeout_s
        self._secrets = secret_spans
        """Where the stores' redaction finds secrets: a head of a text shown in an error (which
        is stored) never ends inside one (``head_of``)."""

    def _head(self, text: str, limit: int) -> str:
        return head_of(text, limit, self._secrets)

    async def run(
        self,
        call: ToolCall,
        context: ToolContext,
        *,
        allowed: Collection[str] | None = None,
        gate: ToolGate | None = None,
        ledger: CallLedger | None = None,
        confirm_rerun: ConfirmRerun | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
        before: BeforeHooks | None = None,
        observe: ObserveResult | None = None,
        screen: Screen | None = None,
    ) -> ToolResult:
        """Run ``call``; only tools in ``allowed`` (when given) may be used.

        ``before`` (the host's hooks) is awaited after validation and may block the call or
        rewrite it; then ``gate`` is awaited, before the tool runs, with the call as it now
        is; the permit it returns goes to the tool in its context. Without a gate the tool
        runs with the default (read-only, no network) permit. With ``ledger``, see the
        module docstring: a result it recorded is reused without ``before`` being called.
        ``settle`` is awaited right before the tool acts (the caller commits what it recorded
        so far: the tool may take long, or never return). ``observe`` is awaited with every
        result, refusals included (not when the call waits for a human or is canceled).
        ``screen`` checks a call that is to run before all of these see it.
        """
        seen = _Seen(call)
        try:
            result = await self._run(
                seen, context, allowed, gate, ledger, confirm_rerun, settle, before, screen
            )
        except ToolError as exc:
            result = _error(call, exc)
        if observe is not None:
            await observe(seen.call, result, seen.reused)
        return result

    async def _run(
        self,
        seen: _Seen,
        context: ToolContext,
        allowed: Collection[str] | None,
        gate: ToolGate | None,
        ledger: CallLedger | None,
        confirm_rerun: ConfirmRerun | None,
        settle: Callable[[], Awaitable[None]] | None,
        before: BeforeHooks | None,
        screen: Screen | None,
    ) -> ToolResult:
        call = seen.call
        if allowed is not None and call.name not in allowed:
            raise ToolNotFoundError(
                f"unknown tool {call.name!r}; "
                f"available tools: {', '.join(sorted(allowed)) or 'none'}",
                tool_name=call.name,
            )
        tool = self._registry.get(call.name)
        if call.arguments is None:
            raw = self._head(call.raw_arguments or "", _RAW_ARGUMENTS_SHOWN)
            raise ToolArgumentsError(
                # As received: ``repr`` would spell a secret in them again (doubled
                # backslashes), past what the stores' redaction recognises.
                f"arguments for tool {call.name!r} must be a JSON object; received: {raw}",
                tool_name=call.name,
            )
        preapproved = False
        recorded = ledger.recorded(call) if ledger is not None else None
        reused = recorded.result if recorded is not None and recorded.status == "finished" else None
        if screen is not None and reused is None:
            # Before validation too: a schema error about the placeholder would hide why.
            screen(call, call.arguments)
        arguments = tool.validate_arguments(call.arguments)
        if reused is not None:
            # It ran to the end before the process stopped: never again.
            seen.reused = True
            return reused.model_copy(update={"call_id": call.id, "name": call.name})
        if before is not None:
            call, arguments = await before(call, tool, arguments)
            seen.call = call
        given: Mapping[str, Any] = call.arguments or {}
        if (
            ledger is not None
            and recorded is not None
            and not ledger.reruns_safely(tool, arguments, context)
        ):
            if confirm_rerun is None:
                raise ToolExecutionError(
                    f"{call.name} was interrupted while it ran, so it may or may not have "
                    "taken effect; it was not run again. Check its effect before retrying",
                    tool_name=call.name,
                )
            await confirm_rerun(call, tool, given, arguments, context, recorded)
            preapproved = True
        if gate is not None:
            permit = await gate(call, tool, given, arguments, context, preapproved)
            context = dataclasses.replace(context, permit=permit)
        key = None
        if ledger is not None:
            idempotent = ledger.reruns_safely(tool, arguments, context)
            key = await ledger.begin(call, tool, given, idempotent=idempotent)
            context = dataclasses.replace(context, idempotency_key=key, work=UninterruptibleWork())
            context.work.report_late = _late_reporter(ledger, key, call, self._head)
        if settle is not None:
            await settle()
        try:
            result = await self._invoke(call, tool, arguments, context)
        except anyio.get_cancelled_exc_class():
            if ledger is not None and key is not None:
                with anyio.CancelScope(shield=True):
                    await _record_cut(
                        ledger, key, call, context.work, "the task was canceled", self._head
                    )
            raise
        if ledger is not None and key is not None:
            if result.error_type == ToolTimeoutError.__name__:
                await _record_cut(
                    ledger, key, call, context.work, "its time limit passed", self._head, result
                )
            else:
                await ledger.finish(key, result)
        return result

    async def _invoke(
        self, call: ToolCall, tool: ITool, arguments: Mapping[str, Any], context: ToolContext
    ) -> ToolResult:
        timeout = tool.spec.timeout_s or self._default_timeout_s
        try:
            with anyio.move_on_after(timeout):
                return ToolResult(
                    call_id=call.id, name=call.name, content=await tool.invoke(arguments, context)
                )
        except ToolError as exc:
            return _error(call, exc)
        except Exception as exc:
            log.debug("tool %s raised", call.name, exc_info=True)
            return _error(
                call,
                ToolExecutionError(
                    f"tool {call.name!r} failed: {type(exc).__name__}: {exc}",
                    tool_name=call.name,
                ),
            )
        except BaseException as exc:
            # A tool's SystemExit (sys.exit in a script turned tool) or other BaseException
            # is its failure, not the host's exit nor a cancel of the task; the kernel's own
            # cancellation and Ctrl-C go on up (``is_interruption``).
            if is_interruption(exc):
                raise
            log.warning("tool %s raised %s", call.name, type(exc).__name__, exc_info=True)
            return _error(
                call,
                ToolExecutionError(
                    f"tool {call.name!r} failed: it raised {type(exc).__name__}: {exc}",
                    tool_name=call.name,
                ),
            )
        message = f"tool {call.name!r} did not finish within {timeout:g} s"
        work = context.work
        if work.outcome is not None:
            message += (
                f"; it ended {work.grace_s:g} s later at most: {self._head(work.outcome, 500)}"
            )
        elif work.still_running:
            message += "; it is still running and its effect may come later"
        return _error(call, ToolTimeoutError(message, tool_name=call.name))


class _Seen:
    """What ``ToolRunner.run`` learns while running a call, for ``observe``."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        """The call as the hooks left it."""
        self.reused = False
        """Its result came from the ledger."""


def _error(call: ToolCall, exc: ToolError) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        name=call.name,
        content=f"Error: {exc}",
        is_error=True,
        error_type=type(exc).__name__,
    )


async def _record_cut(
    ledger: CallLedger,
    key: str,
    call: ToolCall,
    work: UninterruptibleWork,
    why: str,
    head: Callable[[str, int], str],
    result: ToolResult | None = None,
) -> None:
    """Record a call the kernel stopped waiting for, with what it did after the cut."""
    result = result or ToolResult(
        call_id=call.id, name=call.name, content=f"Error: {why}", is_error=True
    )
    if work.outcome is not None:
        note = f"{why}; it ended shortly after: {head(work.outcome, 500)}"
    elif work.still_running:
        note = f"{why}; it was still running when the kernel stopped waiting"
    else:
        note = why
    await ledger.finish(key, result, status="timed_out", note=note)


def _late_reporter(
    ledger: CallLedger, key: str, call: ToolCall, head: Callable[[str, int], str]
) -> Callable[[str], None]:
    """A callback for the tool's worker thread: record that the work ended after all."""
    token = anyio.lowlevel.current_token()

    def report(outcome: str) -> None:
        result = ToolResult(
            call_id=call.id,
            name=call.name,
            content=f"Error: it ended after the kernel stopped waiting: {head(outcome, 500)}",
            is_error=True,
            error_type=ToolTimeoutError.__name__,
        )

        async def record() -> None:
            await ledger.finish(
                key, result, status="timed_out", note=f"ended late: {head(outcome, 500)}"
            )

        try:
            # In a context of its own: the worker thread carries the task's (its unit of
            # work, the run's fence), which ended with the run; this record is no part of it.
            contextvars.Context().run(lambda: anyio.from_thread.run(record, token=token))
        except Exception:  # the kernel is gone: nothing left to tell
            log.debug("could not record the late end of %s", call.name, exc_info=True)

    return report
