"""The kernel as a JSON-RPC 2.0 server: requests in, responses and notifications out.

The messages are ``shared.agent_protocol.rpc``'s. Rules a host can rely on:

* Every request (a message with an ``id``) gets exactly one response; a notification from
  the host (no ``id``) gets none, and an unknown one is ignored.
* ``execute_task`` answers as soon as the task is stored (``queued``), before any
  notification of the task; the task runs in the background. ``resolve_approval`` answers
  once the decision is stored; the task carries on in the background.
* Every event of every task the kernel publishes becomes a ``task/event`` notification, in
  the order published. Each time a run started here stops (the task ended, or waits for a
  human) a ``task/result`` follows its last event. A task waiting for a human is announced
  by ``approval/requested`` once its run has stopped, so an answer sent on receipt is
  always taken.
* Bad input is answered and forgotten: a line that is not JSON, not a request, too long, a
  reused id, an unknown method, bad params each get an error response (``ErrorCode``) and
  change nothing else. Requests are handled concurrently, so a slow one holds no other up.

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
from typing import Any

import anyio
import anyio.abc
from pydantic import BaseModel, ValidationError

from core_agent.contracts.errors import CoreAgentError, UsageError
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.stdio_server.line_channel import LineReader, LineWriter, OversizedLine
from shared.agent_protocol import (
    RPC_METHODS,
    TERMINAL_EVENT_KINDS,
    ApprovalAccepted,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    ErrorCode,
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
    GetTaskParams,
    ListPendingApprovalsParams,
    ListTasksParams,
    PendingApprovals,
    PingParams,
    Pong,
    TaskList,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
DEFAULT_DRAIN_S = 10.0
_ENVELOPE_MEMBERS = frozenset({"jsonrpc", "id", "method", "params"})

RequestId = int | str | None


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
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        drain_s: float = DEFAULT_DRAIN_S,
    ) -> None:
        self._kernel = kernel
        self._input_fd = input_fd
        self._writer = LineWriter(output_fd, on_broken=self.stop)
        self._max_message_bytes = max_message_bytes
        self._drain_s = drain_s
        self._reading = anyio.CancelScope()
        self._draining = anyio.CancelScope()
        self._in_flight: dict[int | str, _Call] = {}
        self._awaiting_queued: dict[str, _Call] = {}
        """``execute_task`` calls by the id of the task they create, answered when it is
        queued."""
        self._awaiting_decision: dict[str, _Call] = {}
        """``resolve_approval`` calls by request id, answered when the decision is stored."""
        self._unannounced: dict[str, list[ApprovalRequest]] = {}
        """Approval requests of each task not yet sent as ``approval/requested``."""
        self._driven: Counter[str] = Counter()
        """Tasks whose run was started here and has not returned."""
        self._active_runs = 0
        self._runs_changed = anyio.Event()
        self._handlers: dict[str, Handler] = {
            "execute_task": self._execute_task,
            "cancel_task": self._cancel_task,
            "resolve_approval": self._resolve_approval,
            "list_tasks": self._list_tasks,
            "get_task": self._get_task,
            "get_trace": self._get_trace,
            "list_pending_approvals": self._list_pending_approvals,
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
                async with anyio.create_task_group() as requests:
                    self._requests = requests
                    reader = LineReader(self._input_fd, max_bytes=self._max_message_bytes)
                    with self._reading:
                        while (lines := await reader.read()) is not None:
                            for line in lines:
                                self._on_line(line)
                await self._drain()
                if self._active_runs:
                    left = sorted(self._driven)
                    log.warning("leaving %d task(s) for recovery: %s", len(left), left)
                    self._kernel.leave_runs()
                    runs.cancel_scope.cancel()
        finally:
            subscription.cancel()
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
        try:
            self._take_line(line)
        except Exception as exc:
            # Whatever one message does, it is answered and the others go on.
            log.error("handling a message failed", exc_info=exc)
            self._send_error(
                None, ErrorCode.INTERNAL_ERROR, f"the message could not be handled: {exc}"
            )

    def _take_line(self, line: bytes | OversizedLine) -> None:
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
            call, params = self._parse(line)
        except _Refusal as refusal:
            self._send_error(None, refusal.code, str(refusal), refusal.data)
            return
        if call is None:
            return
        try:
            handler = self._handlers[call.method]
            model = RPC_METHODS[call.method].params.model_validate(params)
        except ValidationError as exc:
            self._fail(call, _Refusal(ErrorCode.INVALID_PARAMS, *_params_error(call.method, exc)))
            return
        if not call.notification and call.id is not None:
            self._in_flight[call.id] = call
        assert self._requests is not None
        self._requests.start_soon(self._answer_with, call, handler, model)

    def _parse(self, line: bytes) -> tuple[_Call | None, Any]:
        """The call a line holds and its raw params; ``None`` for a notification to ignore.

        Raises:
            _Refusal: The line is not a request this server takes (answered with id null,
                or with its id when that could be read; see ``_send_error``).
        """
        try:
            payload = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise _Refusal(ErrorCode.PARSE_ERROR, f"parse error: {_first_line(exc)}") from exc
        if b"\\u" in line and _holds_lone_surrogates(payload):
            # "\ud800" is valid JSON but no text: it could never be written back out.
            raise _Refusal(
                ErrorCode.INVALID_REQUEST,
                "the message holds text that is not valid Unicode (a lone surrogate escape)",
            )
        if isinstance(payload, list):
            raise _Refusal(
                ErrorCode.INVALID_REQUEST, "batches are not supported: send one request a line"
            )
        if not isinstance(payload, dict):
            raise _Refusal(ErrorCode.INVALID_REQUEST, "a request is a JSON object")
        has_id = "id" in payload
        rid = payload.get("id")
        id_ok = rid is None or type(rid) in (int, str)
        reply_id: RequestId = rid if has_id and id_ok else None
        problem = None
        if payload.get("jsonrpc") != "2.0":
            problem = 'not a JSON-RPC 2.0 request: "jsonrpc" must be "2.0"'
        elif not id_ok:
            problem = '"id" must be a string, an integer or null'
        elif not isinstance(payload.get("method"), str):
            problem = '"method" must be a string'
        elif unknown := sorted(set(payload) - _ENVELOPE_MEMBERS):
            problem = f"unknown member(s) of a request: {', '.join(unknown)}"
        if problem is not None:
            if reply_id is not None:
                self._send_error(reply_id, ErrorCode.INVALID_REQUEST, problem)
                return None, None
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
            return None, None
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
            return None, None
        return call, params

    async def _answer_with(self, call: _Call, handler: Handler, params: Any) -> None:
        try:
            result = await handler(call, params)
        except Exception as exc:
            self._fail(call, exc)
            return
        if result is not None:
            self._answer(call, result)

    # --- output -----------------------------------------------------------------------------

    def _answer(self, call: _Call, result: BaseModel) -> None:
        if call.answered:
            return
        self._done(call)
        if not call.notification:
            self._writer.send(
                b'{"jsonrpc":"2.0","id":'
                + _json(call.id)
                + b',"result":'
                + result.model_dump_json().encode()
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
            b'{"jsonrpc":"2.0","id":' + _json(rid) + b',"error":' + _json(error) + b"}\n"
        )

    def _notify(self, method: bytes, params: BaseModel) -> None:
        self._writer.send(
            b'{"jsonrpc":"2.0","method":"'
            + method
            + b'","params":'
            + params.model_dump_json().encode()
            + b"}\n"
        )

    def _on_event(self, event: BaseModel) -> None:
        """Every event the kernel publishes, in the publisher's task (so in order)."""
        if not isinstance(event, TaskEvent):
            return
        task_id = event.task_id
        # A response goes out before the notification that settles it, so a host always
        # knows the task (or decision) before it hears of it.
        if isinstance(event, TaskQueued):
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
                self._answer(call, ApprovalAccepted(request_id=request_id, task_id=task_id))
        self._notify(b"task/event", event)
        if isinstance(event, ApprovalRequested):
            self._unannounced.setdefault(task_id, []).append(event.request)
        elif isinstance(event, TaskWaitingApproval) and not self._driven[task_id]:
            # A run this server did not start (background recovery): announced now.
            self._announce(task_id)
        elif event.kind in TERMINAL_EVENT_KINDS:
            self._unannounced.pop(task_id, None)

    def _announce(self, task_id: str) -> None:
        for request in self._unannounced.pop(task_id, []):
            self._notify(b"approval/requested", request)

    # --- runs -------------------------------------------------------------------------------

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
            self._active_runs -= 1
            self._runs_changed.set()
            self._runs_changed = anyio.Event()
        if result is None:
            return
        self._answer(call, accepted(result))  # only if no event answered it (never, normally)
        self._notify(b"task/result", result)
        if result.status is TaskStatus.WAITING_APPROVAL:
            self._announce(result.task_id)
        elif not self._driven[result.task_id]:
            self._unannounced.pop(result.task_id, None)

    # --- methods ----------------------------------------------------------------------------

    async def _execute_task(self, call: _Call, request: TaskRequest) -> None:
        task_id = uuid.uuid4().hex
        self._awaiting_queued[task_id] = call

        def accepted(result: TaskResult) -> BaseModel:
            return TaskAccepted(
                task_id=result.task_id, session_id=result.session_id, trace_id=result.trace_id
            )

        async def run() -> TaskResult:
            try:
                return await self._kernel.execute_task(request, task_id=task_id)
            finally:
                self._awaiting_queued.pop(task_id, None)

        self._start_run(call, run, accepted, task_id)

    async def _resolve_approval(self, call: _Call, decision: ApprovalDecision) -> None:
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


def _holds_lone_surrogates(payload: Any) -> bool:
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


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
