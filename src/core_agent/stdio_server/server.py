r"""The kernel as a JSON-RPC 2.0 server: requests in, responses and notifications out.

The messages are ``shared.agent_protocol.rpc``'s. Rules a host can rely on:

* Every request (a message with an ``id``) gets exactly one response; a notification from
  the host (no ``id``) gets none, and an unknown one is ignored.
* ``execute_task`` answers as soon as the task is stored (``queued``), before any
  notification of the task; the task runs in the background. ``resolve_approval`` answers
  once the decision is stored; the task carries on in the background.
* Every event of every task the kernel publishes becomes a ``task/event`` notification, in
  the order published (but see backpressure). Each time a run started here stops (the task
  ended, or waits for a human) a ``task/result`` follows its last event. A task waiting for
  a human is announced by ``approval/requested`` once its run has stopped, so an answer
  sent on receipt is always taken.
* Every task this connection started (or carried on with ``resolve_approval``) gets a final
  ``task/result`` when it ends, however it ends: its run here ended; it was canceled while
  it waited for a human; or another process carried it to its end (seen within
  ``watch_s``).
* Bad input is answered and forgotten: a line that is not JSON, not a request, too long, a
  reused id, an unknown method, bad params (checked strictly: ``"yes"`` is no boolean),
  text that is not valid Unicode (a lone surrogate escape, ``"\ud800"``) each get an error
  response (``ErrorCode``) and change nothing else. Whatever fails while one message is
  handled is answered to that message (``-32603`` for a bug of ours), never felt by the
  others. Requests are handled concurrently, so a slow one holds no other up.
* Output can always be encoded: text that is not valid Unicode (a file name of undecodable
  bytes, say) is sent with U+FFFD in place of each lone surrogate.

Backpressure, for a host that reads stdout slowly or not at all: at most
``output_buffer_bytes`` of output wait for it in memory (the writer is then backed up).
While it is backed up, (1) ``llm.delta`` notifications are dropped: the ``llm.completed``
event that follows carries the whole text (the host sees a gap in the task's ``seq``);
(2) no more requests are read, so the host's writes block once the pipe is full; (3) every
other notification waits, and the run that published it with it (in the event loop: it
never blocks the loop), until the host has read enough. A connection has at most
``max_requests`` requests being handled (the next line is read once one is answered) and
``max_tasks`` runs going (``execute_task`` or ``resolve_approval`` past it is refused with
``ErrorCode.BUSY``: waiting would hold up the requests behind it, a ``cancel_task`` say).

Shutdown (``stop``, or the end of the host's input): no more requests are read; the tasks
whose runs are still going get ``drain_s`` to end or reach a wait (their notifications are
still written), and those still running then are left for recovery, not canceled: each keeps
its last checkpoint and the next kernel with ``AGENT_RECOVERY=resume`` (or ``core-agent
recover``) carries it on. Tasks waiting for a human stay waiting, durably.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.abc
from pydantic import BaseModel, ValidationError

from core_agent.contracts.errors import CoreAgentError, UsageError
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.stdio_server.line_channel import (
    DEFAULT_MAX_QUEUED_BYTES,
    LineReader,
    LineWriter,
    OversizedLine,
)
from core_agent.stdio_server.task_reports import (
    OwnedTask,
    result_from_event,
    result_from_state,
)
from core_agent.stdio_server.wire_json import (
    describe,
    is_unicode,
    json_bytes,
    lone_surrogate_at,
    may_hold_lone_surrogates,
    model_json,
)
from shared.agent_protocol import (
    RPC_METHODS,
    TERMINAL_EVENT_KINDS,
    ApprovalAccepted,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ErrorCode,
    LLMDelta,
    SessionInfo,
    TaskAccepted,
    TaskEvent,
    TaskQueued,
    TaskRequest,
    TaskResult,
    TaskState,
    TaskStatus,
    TaskTrace,
    TaskWaitingApproval,
    TraceSpan,
)
from shared.agent_protocol.rpc import (
    CancelTaskParams,
    ForkSessionParams,
    GetTaskParams,
    ListPendingApprovalsParams,
    ListTasksParams,
    PendingApprovals,
    PingParams,
    Pong,
    RetryFromTurnParams,
    TaskList,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
DEFAULT_DRAIN_S = 10.0
DEFAULT_MAX_REQUESTS = 1024
DEFAULT_MAX_TASKS = 256
DEFAULT_WATCH_S = 2.0
_ENVELOPE_MEMBERS = frozenset({"jsonrpc", "id", "method", "params"})

RequestId = int | str | None


@dataclass(frozen=True)
class ServerLimits:
    """What one connection may hold at once (``core-agent serve --stdio`` options)."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """The longest request line; a longer one is refused as it is read."""
    max_requests: int = DEFAULT_MAX_REQUESTS
    """Requests (and notifications from the host) handled at once; the next line is read
    once one is answered."""
    max_tasks: int = DEFAULT_MAX_TASKS
    """Runs started by ``execute_task`` or ``resolve_approval`` going at once; one more
    is refused (a task waiting for a human has no run)."""
    output_buffer_bytes: int = DEFAULT_MAX_QUEUED_BYTES
    """Output that may wait for a host that reads slowly (see the module)."""


@dataclass(eq=False)
class _Call:
    """One request being answered (``notification``: the host wants no answer)."""

    id: RequestId
    method: str
    notification: bool
    answered: bool = False
    task_id: str | None = None
    """For ``resolve_approval``: the task the decision was for, once it is recorded."""


class _Refusal(Exception):
    """A request refused before it reaches the kernel."""

    def __init__(self, code: ErrorCode, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


Handler = Callable[[_Call, Any], Awaitable[BaseModel | None]]


class StdioServer:
    """Serves ``kernel`` to one host over the file descriptors ``input_fd`` and ``output_fd``.

    ``serve`` returns once the host's input ended (or ``stop`` was called) and the runs it
    started have ended or been left (see the module). The caller enters and closes the
    kernel.
    """

    def __init__(
        self,
        kernel: AgentKernel,
        *,
        input_fd: int,
        output_fd: int,
        limits: ServerLimits | None = None,
        drain_s: float = DEFAULT_DRAIN_S,
        watch_s: float = DEFAULT_WATCH_S,
    ) -> None:
        self._kernel = kernel
        self._input_fd = input_fd
        self._limits = limits or ServerLimits()
        self._writer = LineWriter(
            output_fd, max_queued_bytes=self._limits.output_buffer_bytes, on_broken=self.stop
        )
        self._drain_s = drain_s
        self._watch_s = watch_s
        self._reading = anyio.CancelScope()
        self._draining = anyio.CancelScope()
        self._watching = anyio.CancelScope()
        self._in_flight: dict[int | str, _Call] = {}
        self._handling = 0
        """Requests and host notifications whose handlers have not returned."""
        self._handling_changed = anyio.Event()
        self._awaiting_queued: dict[str, _Call] = {}
        """``execute_task`` calls by the id of the task they create, answered when it is
        queued."""
        self._awaiting_decision: dict[str, _Call] = {}
        """``resolve_approval`` calls by request id, answered when the decision is stored."""
        self._unannounced: dict[str, list[ApprovalRequest]] = {}
        """Approval requests of each task not yet sent as ``approval/requested``."""
        self._driven: Counter[str] = Counter()
        """Tasks whose run was started here and has not returned."""
        self._owned: dict[str, OwnedTask] = {}
        self._active_runs = 0
        self._runs_changed = anyio.Event()
        self._turn = anyio.Lock()
        """Taken, in order, by output that waits for room (so it keeps its order)."""
        self._waiting_output = 0
        self._dropped_deltas = 0
        self._dropping_deltas = False
        self._handlers: dict[str, Handler] = {
            "execute_task": self._execute_task,
            "cancel_task": self._cancel_task,
            "resolve_approval": self._resolve_approval,
            "list_tasks": self._list_tasks,
            "get_task": self._get_task,
            "get_trace": self._get_trace,
            "list_pending_approvals": self._list_pending_approvals,
            "retry_from_turn": self._retry_from_turn,
            "fork_session": self._fork_session,
            "ping": self._ping,
        }
        self._requests: anyio.abc.TaskGroup | None = None
        self._runs: anyio.abc.TaskGroup | None = None

    def stop(self, *, drain: bool = True) -> None:
        """Read no more requests and shut down (without ``drain``: leave the runs at once)."""
        if not drain:
            self._drain_s = 0.0
            self._draining.cancel()  # also when the drain has begun
        self._reading.cancel()

    async def serve(self) -> None:
        """Answer the host until its input ends or ``stop``; then shut down (see the module)."""
        subscription = self._kernel.event_bus.subscribe(None, self._on_event)
        self._writer.start()
        try:
            async with anyio.create_task_group() as runs:
                self._runs = runs
                runs.start_soon(self._watch_owned)
                async with anyio.create_task_group() as requests:
                    self._requests = requests
                    reader = LineReader(self._input_fd, max_bytes=self._limits.max_message_bytes)
                    with self._reading:
                        while True:
                            # Backpressure: a host that does not read gets no more answers.
                            await self._writer.wait_for_room()
                            if (lines := await reader.read()) is None:
                                break
                            for line in lines:
                                while self._handling >= self._limits.max_requests:
                                    await self._handling_changed.wait()
                                self._on_line(line)
                await self._drain()
                self._watching.cancel()
                if self._active_runs:
                    left = sorted(self._driven)
                    log.warning("leaving %d task(s) for recovery: %s", len(left), left)
                    self._kernel.leave_runs()
                    runs.cancel_scope.cancel()
        finally:
            subscription.cancel()
            if self._dropped_deltas:
                log.warning(
                    "%d llm.delta notification(s) were dropped while the host read slowly",
                    self._dropped_deltas,
                )
            self._writer.close()
            with anyio.CancelScope(shield=True):
                await self._writer.wait_closed(self._drain_s + 5.0)

    async def _drain(self) -> None:
        with self._draining:
            self._draining.deadline = anyio.current_time() + self._drain_s
            while self._active_runs:
                await self._runs_changed.wait()

    # --- input ------------------------------------------------------------------------------

    def _on_line(self, line: bytes | OversizedLine) -> None:
        """Handle one line; whatever goes wrong is answered to it, never felt by the others."""
        try:
            self._take(line)
        except Exception as exc:
            log.error("a request line could not be handled", exc_info=exc)
            self._send_error(
                None, ErrorCode.INTERNAL_ERROR, _first_line(exc), {"type": type(exc).__name__}
            )

    def _take(self, line: bytes | OversizedLine) -> None:
        if isinstance(line, OversizedLine):
            self._send_error(
                None,
                ErrorCode.INVALID_REQUEST,
                f"message longer than the limit of {line.limit_bytes} bytes: dropped "
                "(core-agent serve --max-message-bytes)",
                {"limit_bytes": line.limit_bytes},
            )
            return
        if not line.strip():
            return  # a blank line is no message
        try:
            parsed = self._parse(line)
        except _Refusal as refusal:
            self._send_error(None, refusal.code, str(refusal), refusal.data)
            return
        if parsed is None:
            return
        call, params = parsed
        try:
            self._dispatch(call, params)
        except Exception as exc:
            self._fail(call, exc)

    def _parse(self, line: bytes) -> tuple[_Call, dict[str, Any]] | None:
        """The call a line holds and its raw params; ``None`` when it was answered already.

        Raises:
            _Refusal: The line is not a request this server takes (answered with id null,
                or with its id when that could be read; see ``_send_error``).
        """
        try:
            payload = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise _Refusal(ErrorCode.PARSE_ERROR, f"parse error: {_first_line(exc)}") from exc
        if isinstance(payload, list):
            raise _Refusal(
                ErrorCode.INVALID_REQUEST, "batches are not supported: send one request a line"
            )
        if not isinstance(payload, dict):
            raise _Refusal(ErrorCode.INVALID_REQUEST, "a request is a JSON object")
        # Text that is not valid Unicode cannot be stored, nor echoed in an id: refused here.
        bad_text = lone_surrogate_at(payload) if may_hold_lone_surrogates(line) else None
        has_id = "id" in payload
        rid = payload.get("id")
        id_ok = rid is None or type(rid) is int or (type(rid) is str and is_unicode(rid))
        reply_id: RequestId = rid if has_id and id_ok else None
        problem = None
        if payload.get("jsonrpc") != "2.0":
            problem = 'not a JSON-RPC 2.0 request: "jsonrpc" must be "2.0"'
        elif not id_ok:
            problem = (
                '"id" must be a string, an integer or null'
                if type(rid) is not str
                else '"id" is not valid Unicode text (it holds a lone surrogate)'
            )
        elif not isinstance(payload.get("method"), str):
            problem = '"method" must be a string'
        elif bad_text is not None and bad_text[0] != "params":
            problem = f"{describe(bad_text)} is not valid Unicode text (a lone surrogate)"
        elif unknown := sorted(set(payload) - _ENVELOPE_MEMBERS):
            problem = f"unknown member(s) of a request: {', '.join(unknown)}"
        if problem is not None:
            if reply_id is not None:
                self._send_error(reply_id, ErrorCode.INVALID_REQUEST, problem)
                return None
            raise _Refusal(ErrorCode.INVALID_REQUEST, problem)
        method: str = payload["method"]
        call = _Call(id=reply_id, method=method, notification=not has_id)
        if method not in RPC_METHODS:
            if not call.notification:
                names = ", ".join(RPC_METHODS)
                self._fail(
                    call,
                    _Refusal(
                        ErrorCode.METHOD_NOT_FOUND, f"unknown method {method!r}; methods: {names}"
                    ),
                )
            return None
        if rid is not None and rid in self._in_flight and not call.notification:
            # Answered with id null: a response carrying the id would pass for the answer
            # to the request still in flight.
            raise _Refusal(
                ErrorCode.INVALID_REQUEST,
                f"request id {rid!r} is in use by a request in flight: ids must be unique "
                "until answered",
                {"id": rid},
            )
        params = payload.get("params", {})
        if not isinstance(params, dict):
            self._fail(
                call,
                _Refusal(
                    ErrorCode.INVALID_PARAMS,
                    "params must be a JSON object (params by position are not supported)",
                ),
            )
            return None
        if bad_text is not None:
            self._fail(
                call,
                _Refusal(
                    ErrorCode.INVALID_PARAMS,
                    f"invalid params for {method}: {describe(bad_text[1:])} is not valid Unicode "
                    "text (a lone surrogate)",
                ),
            )
            return None
        return call, params

    def _dispatch(self, call: _Call, params: dict[str, Any]) -> None:
        handler = self._handlers[call.method]
        try:
            raw = json.dumps(params, ensure_ascii=False, allow_nan=False)
        except ValueError as exc:  # 1e400: no double holds it
            raise _Refusal(
                ErrorCode.INVALID_PARAMS, f"invalid params for {call.method}: {exc}"
            ) from exc
        try:
            model = RPC_METHODS[call.method].parse_params(raw)
        except ValidationError as exc:
            raise _Refusal(ErrorCode.INVALID_PARAMS, *_params_error(call.method, exc)) from exc
        if not call.notification and call.id is not None:
            self._in_flight[call.id] = call
        self._handling += 1
        assert self._requests is not None
        self._requests.start_soon(self._answer_with, call, handler, model)

    async def _answer_with(self, call: _Call, handler: Handler, params: Any) -> None:
        try:
            result = await handler(call, params)
            if result is not None:
                self._answer(call, result)
        except Exception as exc:
            self._fail(call, exc)
        finally:
            self._handling -= 1
            self._handling_changed.set()
            self._handling_changed = anyio.Event()

    # --- output -----------------------------------------------------------------------------

    def _answer(self, call: _Call, result: BaseModel) -> None:
        if call.answered:
            return
        self._done(call)
        if not call.notification:
            self._writer.send(
                b'{"jsonrpc":"2.0","id":'
                + json_bytes(call.id)
                + b',"result":'
                + model_json(result)
                + b"}\n"
            )

    def _fail(self, call: _Call, exc: Exception) -> None:
        if call.answered:
            return
        self._done(call)
        if isinstance(exc, _Refusal):
            code, data = exc.code, exc.data
        elif isinstance(exc, UsageError):
            code, data = ErrorCode.USAGE_ERROR, {"type": type(exc).__name__}
        elif isinstance(exc, CoreAgentError):
            code, data = ErrorCode.KERNEL_ERROR, {"type": type(exc).__name__}
        else:
            log.error("%s failed", call.method, exc_info=exc)
            code, data = ErrorCode.INTERNAL_ERROR, {"type": type(exc).__name__}
        message = _first_line(exc) or type(exc).__name__
        if call.notification:
            log.warning("notification %s failed: %s", call.method, message)
            return
        self._send_error(call.id, code, message, data)

    def _done(self, call: _Call) -> None:
        call.answered = True
        if call.id is not None and self._in_flight.get(call.id) is call:
            del self._in_flight[call.id]

    def _send_error(
        self, rid: RequestId, code: ErrorCode, message: str, data: dict[str, Any] | None = None
    ) -> None:
        error: dict[str, Any] = {"code": int(code), "message": message}
        if data is not None:
            error["data"] = data
        self._writer.send(
            b'{"jsonrpc":"2.0","id":' + json_bytes(rid) + b',"error":' + json_bytes(error) + b"}\n"
        )

    def _notify(self, method: bytes, params: BaseModel) -> None:
        self._writer.send(
            b'{"jsonrpc":"2.0","method":"' + method + b'","params":' + model_json(params) + b"}\n"
        )

    async def _in_turn(self, output: Callable[[], None]) -> None:
        """Give ``output`` once the host has read enough, after the output waiting before."""
        self._waiting_output += 1
        try:
            async with self._turn:
                await self._writer.wait_for_room()
                output()
        finally:
            self._waiting_output -= 1

    def _must_wait(self) -> bool:
        return self._waiting_output > 0 or self._writer.backed_up

    def _on_event(self, event: BaseModel) -> Awaitable[None] | None:
        """Every event the kernel publishes, in the publisher's task (so in order).

        While the host reads too slowly, an ``llm.delta`` is dropped and any other event
        holds its publisher until the host has read enough (see the module).
        """
        if not isinstance(event, TaskEvent):
            return None
        self._settle_calls(event)
        if isinstance(event, LLMDelta) and self._writer.backed_up:
            if not self._dropping_deltas:
                log.warning(
                    "the host is %d bytes behind: llm.delta notifications are dropped until "
                    "it catches up (llm.completed carries the text)",
                    self._writer.queued_bytes,
                )
            self._dropping_deltas = True
            self._dropped_deltas += 1
            return None
        if self._must_wait():
            return self._in_turn(lambda: self._tell(event))
        self._tell(event)
        return None

    def _settle_calls(self, event: TaskEvent) -> None:
        """Answer the request an event settles; a response goes out before its notification.

        So a host always knows the task (or decision) before it hears of it.
        """
        task_id = event.task_id
        if isinstance(event, TaskQueued):
            owned = self._owned.get(task_id)
            if owned is not None:
                owned.session_id, owned.trace_id = event.session_id, event.trace_id
            call = self._awaiting_queued.pop(task_id, None)
            if call is not None:
                accepted = TaskAccepted(
                    task_id=task_id, session_id=event.session_id, trace_id=event.trace_id
                )
                self._answer(call, accepted)
        elif isinstance(event, ApprovalResolved):
            request_id = event.decision.request_id
            call = self._awaiting_decision.pop(request_id, None)
            if call is not None:
                call.task_id = task_id
                self._driven[task_id] += 1
                owned = self._owned.setdefault(task_id, OwnedTask())
                owned.waiting = False
                self._answer(call, ApprovalAccepted(request_id=request_id, task_id=task_id))

    def _tell(self, event: TaskEvent) -> None:
        task_id = event.task_id
        if isinstance(event, LLMDelta):
            self._dropping_deltas = False
        self._notify(b"task/event", event)
        if isinstance(event, ApprovalRequested):
            self._unannounced.setdefault(task_id, []).append(event.request)
        elif isinstance(event, TaskWaitingApproval) and not self._driven[task_id]:
            # A run this server did not start (background recovery): announced now.
            self._announce(task_id)
        elif event.kind in TERMINAL_EVENT_KINDS:
            self._unannounced.pop(task_id, None)
            owned = self._owned.get(task_id)
            if owned is not None:
                owned.final = result_from_event(event, owned)
                if not self._driven[task_id]:
                    self._finish(task_id)  # no run of it here (canceled while it waited)

    def _announce(self, task_id: str) -> None:
        for request in self._unannounced.pop(task_id, []):
            self._notify(b"approval/requested", request)

    def _finish(self, task_id: str) -> None:
        """Send a task's final ``task/result``, made from its terminal event, if not sent."""
        owned = self._owned.get(task_id)
        if owned is None or owned.final is None:
            return
        if owned.session_id is None or owned.trace_id is None:
            # Only when its run here failed before reporting it: learnt from the store.
            assert self._runs is not None
            self._runs.start_soon(self._finish_from_store, task_id)
            return
        del self._owned[task_id]
        self._notify(b"task/result", owned.final)

    async def _finish_from_store(self, task_id: str) -> None:
        try:
            state = await self._kernel.get_task(task_id)
        except Exception as exc:
            log.error("task %s ended, and could not be read to report it", task_id, exc_info=exc)
            return
        owned = self._owned.pop(task_id, None)
        if owned is not None:
            final = owned.final or result_from_state(state)
            result = final.model_copy(
                update={"session_id": state.session_id, "trace_id": state.trace_id}
            )
            await self._output(lambda: self._notify(b"task/result", result))

    async def _output(self, output: Callable[[], None]) -> None:
        if self._must_wait():
            await self._in_turn(output)
        else:
            output()

    async def _watch_owned(self) -> None:
        """Report the tasks this connection started that another process carried to their end.

        A task found ended is reported on the next look, so that the terminal event of a
        task ended in this process (published just after it is stored) comes first.
        """
        with self._watching:
            while True:
                await anyio.sleep(self._watch_s)
                try:
                    await self._look_at_owned()
                except Exception as exc:  # a bug here must not take the server down
                    log.error("looking at the connection's tasks failed", exc_info=exc)

    async def _look_at_owned(self) -> None:
        for task_id, owned in list(self._owned.items()):
            if not owned.waiting or self._driven[task_id]:
                continue
            try:
                state = await self._kernel.get_task(task_id)
            except Exception as exc:
                log.warning("task %s could not be read: %s", task_id, _first_line(exc))
                continue
            if not state.status.is_terminal or self._owned.get(task_id) is not owned:
                continue
            if not owned.seen_ended:
                owned.seen_ended = True
                continue
            del self._owned[task_id]
            await self._output(partial(self._notify, b"task/result", result_from_state(state)))

    # --- runs -------------------------------------------------------------------------------

    def _check_room_for_a_run(self) -> None:
        if self._active_runs >= self._limits.max_tasks:
            raise _Refusal(
                ErrorCode.BUSY,
                f"too many tasks running for this connection (the limit is "
                f"{self._limits.max_tasks}; core-agent serve --max-tasks): try again when "
                "some have ended or wait for a human",
                {"limit": self._limits.max_tasks},
            )

    def _start_run(
        self,
        call: _Call,
        run: Callable[[], Awaitable[TaskResult]],
        accepted: Callable[[TaskResult], BaseModel],
        task_id: str | None,
    ) -> None:
        if task_id is not None:
            self._driven[task_id] += 1
        self._active_runs += 1
        assert self._runs is not None
        self._runs.start_soon(self._run, call, run, accepted, task_id)

    async def _run(
        self,
        call: _Call,
        run: Callable[[], Awaitable[TaskResult]],
        accepted: Callable[[TaskResult], BaseModel],
        task_id: str | None,
    ) -> None:
        result: TaskResult | None = None
        try:
            try:
                result = await run()
            except Exception as exc:
                if call.answered:
                    log.error("a run of task %s failed", task_id or call.task_id, exc_info=exc)
                else:
                    self._fail(call, exc)  # refused before the task (or decision) was stored
            finally:
                task_id = task_id or call.task_id
                if task_id is not None:
                    self._driven[task_id] -= 1
                    if self._driven[task_id] <= 0:
                        del self._driven[task_id]
            # Reported before the run counts as over: the drain waits for the report too.
            if result is not None:
                await self._output(partial(self._report, call, accepted, result))
            elif task_id is not None and not self._driven[task_id]:
                # The run failed: its terminal event, if there was one, is the report.
                await self._output(partial(self._finish, task_id))
        except Exception as exc:
            log.error("the end of a run of task %s could not be reported", task_id, exc_info=exc)
        finally:
            self._active_runs -= 1
            self._runs_changed.set()
            self._runs_changed = anyio.Event()

    def _report(
        self, call: _Call, accepted: Callable[[TaskResult], BaseModel], result: TaskResult
    ) -> None:
        task_id = result.task_id
        self._answer(call, accepted(result))  # only if no event answered it (never, normally)
        driven_here = bool(self._driven[task_id])
        owned = self._owned.get(task_id)
        if result.status.is_terminal:
            if driven_here:
                pass  # another run of it here reports the end
            elif owned is not None:
                del self._owned[task_id]
        else:
            owned = owned or self._owned.setdefault(task_id, OwnedTask())
            owned.session_id, owned.trace_id = result.session_id, result.trace_id
            owned.waiting = result.status is TaskStatus.WAITING_APPROVAL
        self._notify(b"task/result", result)
        if result.status is TaskStatus.WAITING_APPROVAL:
            self._announce(task_id)
        elif not driven_here:
            self._unannounced.pop(task_id, None)

    # --- methods ----------------------------------------------------------------------------

    async def _execute_task(self, call: _Call, request: TaskRequest) -> None:
        await self._start_task(
            call, lambda task_id: self._kernel.execute_task(request, task_id=task_id)
        )

    async def _retry_from_turn(self, call: _Call, params: RetryFromTurnParams) -> None:
        await self._start_task(
            call,
            lambda task_id: self._kernel.retry_from_turn(
                params.session_id, params.turn, task=params.task, task_id=task_id
            ),
        )

    async def _fork_session(self, call: _Call, params: ForkSessionParams) -> SessionInfo:
        return await self._kernel.fork_session(
            params.session_id,
            at_turn=params.at_turn,
            new_session_id=params.new_session_id,
            metadata=params.metadata,
        )

    async def _start_task(
        self, call: _Call, execute: Callable[[str], Awaitable[TaskResult]]
    ) -> None:
        """Run a new task (its id given to ``execute``), answered once it is queued."""
        self._check_room_for_a_run()
        task_id = uuid.uuid4().hex
        self._awaiting_queued[task_id] = call
        self._owned[task_id] = OwnedTask()

        def accepted(result: TaskResult) -> BaseModel:
            return TaskAccepted(
                task_id=result.task_id, session_id=result.session_id, trace_id=result.trace_id
            )

        async def run() -> TaskResult:
            try:
                return await execute(task_id)
            finally:
                self._awaiting_queued.pop(task_id, None)
                if not call.answered:  # refused before it was stored: not a task of ours
                    self._owned.pop(task_id, None)

        self._start_run(call, run, accepted, task_id)

    async def _resolve_approval(self, call: _Call, decision: ApprovalDecision) -> None:
        self._check_room_for_a_run()
        request_id = decision.request_id
        if request_id in self._awaiting_decision:
            raise UsageError(f"a decision on request {request_id!r} is being recorded already")
        self._awaiting_decision[request_id] = call

        def accepted(result: TaskResult) -> BaseModel:
            return ApprovalAccepted(request_id=request_id, task_id=result.task_id)

        async def run() -> TaskResult:
            try:
                return await self._kernel.resolve_approval(request_id, decision)
            finally:
                if self._awaiting_decision.get(request_id) is call:
                    del self._awaiting_decision[request_id]

        self._start_run(call, run, accepted, None)

    async def _cancel_task(self, call: _Call, params: CancelTaskParams) -> TaskState:
        await self._kernel.cancel_task(params.task_id, params.reason)
        return await self._kernel.get_task(params.task_id)

    async def _list_tasks(self, call: _Call, params: ListTasksParams) -> TaskList:
        tasks = await self._kernel.list_tasks(
            session_id=params.session_id, status=params.status, limit=params.limit
        )
        return TaskList(tasks=tasks)

    async def _get_task(self, call: _Call, params: GetTaskParams) -> TaskState:
        return await self._kernel.get_task(params.task_id)

    async def _get_trace(self, call: _Call, params: GetTaskParams) -> TaskTrace:
        task = await self._kernel.get_task(params.task_id)
        spans = await self._kernel.task_spans(params.task_id)
        return TaskTrace(
            task_id=task.task_id,
            trace_id=task.trace_id,
            status=task.status,
            spans=[
                TraceSpan(
                    span_id=s.span_id,
                    parent_span_id=s.parent_span_id,
                    kind=s.kind,
                    name=s.name,
                    status=s.status,
                    started_at=s.started_at,
                    ended_at=s.ended_at,
                    latency_ms=s.latency_ms,
                    tokens_in=s.tokens_in,
                    tokens_out=s.tokens_out,
                    cost_usd=s.cost_usd,
                    error=s.error,
                    # Attributes are free-form: whatever JSON cannot hold is given as text.
                    attributes=json.loads(json.dumps(s.attributes, default=str)),
                )
                for s in spans
            ],
        )

    async def _list_pending_approvals(
        self, call: _Call, params: ListPendingApprovalsParams
    ) -> PendingApprovals:
        return PendingApprovals(requests=await self._kernel.pending_approvals(params.limit))

    async def _ping(self, call: _Call, params: PingParams) -> Pong:
        return Pong()


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _params_error(method: str, exc: ValidationError) -> tuple[str, dict[str, Any]]:
    """A one-line message and the structured errors (without the input, which may be huge)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in errors]
    message = f"invalid params for {method}: " + "; ".join(parts)
    return message, {"errors": json.loads(json.dumps(errors, default=str))}
