"""A thread-safe, blocking handle on the kernel, for GUI apps and other synchronous hosts.

``SyncKernel`` runs an ``AgentKernel`` on an event loop of its own, in a thread it starts
(anyio's blocking portal), and offers its coroutines as calls that block the calling thread.
Any thread may call it, several at once; the kernel's errors are raised in the calling thread
as the same exceptions.

Three kinds of threads meet here:

- the **loop thread** runs the kernel: tasks, tools, model calls. It must never block, and the
  facade's blocking methods refuse to run on it (an async tool or hook awaits the
  ``AgentKernel``'s own methods instead);
- the **host's threads** call the facade: ``execute_task`` blocks one until the task ends,
  ``submit`` and ``stream`` let a GUI thread start a task without waiting;
- **callbacks** (events, approval requests, the approval callback, a handle's done callbacks)
  are handed to ``dispatch``, a callable that runs a zero-argument function soon on the thread
  the host wants. By default a thread of the facade's (``core-agent-callbacks``) runs them one
  at a time, in order. A GUI passes a ``dispatch`` that posts them to its GUI thread: with Qt,
  emit a signal whose connection is queued (see ``examples/desktop_qt``); with Tk,
  a queue polled by ``after``. ``dispatch`` itself is called on the loop thread and must not
  block.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import CancelledError, Future, InvalidStateError, ThreadPoolExecutor
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from queue import SimpleQueue
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

import anyio
import anyio.to_thread
from anyio.from_thread import BlockingPortal, start_blocking_portal
from pydantic import BaseModel

from core_agent.contracts.approval_gateway import ApprovalCallback
from core_agent.contracts.errors import (
    InvalidTransitionError,
    KernelClosedError,
    TaskNotFoundError,
    UsageError,
)
from core_agent.contracts.event_bus import Subscription
from core_agent.contracts.metrics import AgentMetrics
from core_agent.contracts.trace_store import Span
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.safety.approval_gateway import denial
from shared.agent_protocol import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    SessionInfo,
    TaskEvent,
    TaskRequest,
    TaskResult,
    TaskState,
    TaskStatus,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)
P = ParamSpec("P")

Dispatch = Callable[[Callable[[], object]], object]
"""Runs a zero-argument callable soon on the host's chosen thread; called on the loop thread,
it must return at once (post the callable, do not run it and wait)."""

HostApprover = Callable[[ApprovalRequest], "ApprovalDecision | Future[ApprovalDecision]"]
"""An approval callback: the decision, or a ``Future`` the host completes later."""

_CLOSED = "this SyncKernel is closed"
LOOP_THREAD_NAME = "core-agent-kernel"


class CallbackThread:
    """The default ``dispatch``: one thread runs the callbacks, in the order they come."""

    def __init__(self) -> None:
        self._ident: int | None = None
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="core-agent-callbacks", initializer=self._started
        )

    def _started(self) -> None:
        self._ident = threading.get_ident()

    def __call__(self, callback: Callable[[], object]) -> None:
        """Queue ``callback`` to run after the ones queued before it."""
        self._executor.submit(callback)

    def close(self) -> None:
        """Run the callbacks queued so far, then stop the thread."""
        # From one of its own callbacks the thread cannot wait for itself.
        self._executor.shutdown(wait=threading.get_ident() != self._ident)


def _dropped(callback: Callable[[], object]) -> None:
    """The dispatch of a closed handle: nothing more reaches the host."""
    log.debug("SyncKernel is closed; a callback was not delivered: %r", callback)


def _run_logged(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:
        # A host's callback must not stop the delivery of the next ones.
        log.exception("a SyncKernel callback failed")


@dataclass(eq=False)
class _Call:
    """A coroutine the facade runs on the loop for a host thread; ``close`` stops them all."""

    future: Future[Any] | None = None
    stopped: bool = False
    finished: threading.Event = field(default_factory=threading.Event)
    """Set once the coroutine has returned (cleanup included), not merely been cancelled."""


@dataclass(eq=False, frozen=True)
class _Listener:
    deliver: Callable[[TaskEvent], object]
    task_id: str | None = None
    event_type: type[TaskEvent] = TaskEvent


class _ListenerSubscription(Subscription):
    def __init__(self, owner: SyncKernel, listener: _Listener) -> None:
        self._owner = owner
        self._listener = listener

    def cancel(self) -> None:
        """Deliver nothing more to this callback (one already dispatched still runs)."""
        self._owner._remove_listener(self._listener)


class SyncKernel:
    """Runs an ``AgentKernel`` on its own event-loop thread and offers it as blocking calls.

    Thread-safe: every method may be called from any thread but the loop thread, several at
    once. Make one with ``create_sync_kernel`` (same arguments as ``create_kernel``), use it
    as a context manager or call ``close``. See the module for threads and ``dispatch``.

    Approvals reach the host two ways. Durably: with no approval callback a risky call
    suspends its task in ``waiting_approval`` (``execute_task`` returns that result); the
    host learns of it from ``on_approval_request`` or ``pending_approvals`` and answers with
    ``resolve_approval``, now or after a restart. In the run: ``approval_callback`` is
    dispatched with each request and returns the decision, or a ``concurrent.futures.Future``
    it completes later (a non-modal dialog); the task waits meanwhile, up to
    ``AGENT_APPROVAL_TIMEOUT_S``, then the call is denied. If the task stops waiting first
    (canceled, timed out, the kernel closed), that future is cancelled, on the dispatch
    thread: close the dialog then (``future.add_done_callback``). A host that cancels the
    future itself denies the call.

    Args:
        kernel: The kernel to run; this handle enters it (background recovery starts) and
            closes it.
        dispatch: Where callbacks run (default: one thread of the handle's, in order).
        approval_callback: Asked about risky calls in the run (see above).
    """

    def __init__(
        self,
        kernel: AgentKernel,
        *,
        dispatch: Dispatch | None = None,
        approval_callback: HostApprover | None = None,
    ) -> None:
        self._kernel = kernel
        self._own_dispatch: CallbackThread | None = None
        if dispatch is None:
            dispatch = self._own_dispatch = CallbackThread()
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._closed = False
        self._calls: set[_Call] = set()
        self._listeners: tuple[_Listener, ...] = ()
        self._approval_callback: HostApprover | None = None
        self._portal_cm = start_blocking_portal("asyncio")
        self._portal: BlockingPortal = self._portal_cm.__enter__()
        try:
            self._loop_thread = self._portal.call(_name_loop_thread)
            # Entered and left in one task of the loop, as the kernel's task group requires.
            self._kernel_cm: AbstractContextManager[AgentKernel] = (
                self._portal.wrap_async_context_manager(kernel)
            )
            self._kernel_cm.__enter__()
            self._bus = self._portal.call(kernel.event_bus.subscribe, None, self._publish)
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            if self._own_dispatch is not None:
                self._own_dispatch.close()
            raise
        if approval_callback is not None:
            self.set_approval_callback(approval_callback)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> SyncKernel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    @property
    def kernel(self) -> AgentKernel:
        """The kernel; await its coroutines only on the loop thread (``call``, ``start``)."""
        return self._kernel

    def close(self) -> None:
        """Stop the calls in flight, close the kernel and join the loop thread; idempotent.

        The calls in flight are stopped as the async API stops a caller that goes away: their
        tasks end ``canceled`` and the threads blocked in them get ``KernelClosedError``.
        Tasks waiting for a human stay waiting (``resolve_approval`` after a restart), and
        tasks the kernel was recovering are left to be recovered again. Callbacks already
        dispatched still run. Every later call raises ``KernelClosedError``.
        """
        self._refuse_loop_thread("close")
        with self._lock:
            if self._closed:
                return
            self._closed = True
            calls = list(self._calls)
        for call in calls:
            self._stop(call)
        for call in calls:
            call.finished.wait()
        try:
            self._portal.call(self._bus.cancel)
            self._kernel_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            if self._own_dispatch is not None:
                self._own_dispatch.close()
            # Drop the host's callbacks: they often hold the host's window, which holds this
            # handle, and a GUI object must not be freed by a collection on another thread.
            self._listeners = ()
            self._approval_callback = None
            self._dispatch = _dropped

    # -- tasks -------------------------------------------------------------------------------

    @overload
    def execute_task(self, request: TaskRequest) -> TaskResult: ...

    @overload
    def execute_task(self, request: TaskRequest, *, response_model: type[M]) -> M: ...

    def execute_task(
        self, request: TaskRequest, *, response_model: type[M] | None = None
    ) -> TaskResult | M:
        """Run ``request`` to its end and return as ``AgentKernel.execute_task`` does.

        Blocks the calling thread (not the GUI thread: use ``submit`` there). Raises what the
        kernel raises (``UsageError``, ``TaskFailedError`` with a response model...).
        """
        if response_model is None:
            return self.call(self._kernel.execute_task, request)
        return self.call(self._kernel.execute_task, request, response_model=response_model)

    @overload
    def submit(
        self, request: TaskRequest, *, on_event: Callable[[TaskEvent], object] | None = None
    ) -> TaskHandle[TaskResult]: ...

    @overload
    def submit(
        self,
        request: TaskRequest,
        *,
        response_model: type[M],
        on_event: Callable[[TaskEvent], object] | None = None,
    ) -> TaskHandle[M]: ...

    def submit(
        self,
        request: TaskRequest,
        *,
        response_model: type[M] | None = None,
        on_event: Callable[[TaskEvent], object] | None = None,
    ) -> TaskHandle[TaskResult] | TaskHandle[M]:
        """Start ``request`` and return at once with a handle on its run.

        The handle knows the task's id at once (to cancel it, or match events), and gives the
        result as ``execute_task`` would. ``on_event`` receives this task's events on the
        dispatch thread, its first one included, until the call returns.
        """
        task_id = uuid.uuid4().hex
        listening = self.on_event(on_event, task_id=task_id) if on_event is not None else None
        try:
            if response_model is None:
                call, future = self._start(
                    partial(self._kernel.execute_task, request, task_id=task_id)
                )
            else:
                call, future = self._start(
                    partial(
                        self._kernel.execute_task,
                        request,
                        response_model=response_model,
                        task_id=task_id,
                    )
                )
        except BaseException:
            if listening is not None:
                listening.cancel()
            raise
        if listening is not None:
            # The task's last event was dispatched before its call returned.
            future.add_done_callback(lambda _: listening.cancel())
        return TaskHandle(self, task_id, call, future)

    def stream(self, request: TaskRequest) -> EventStream:
        """Run ``request`` and iterate over its events as they happen, ending with the final one.

        Iterating blocks the calling thread until the next event. Leaving early (``close``,
        or a ``with`` block around the loop) cancels the task, which ends ``canceled``, as
        leaving ``AgentKernel.stream_task`` does. An error the kernel raises (before the
        task is created) is raised by the iteration.
        """
        return EventStream(self, request)

    def resolve_approval(
        self,
        request_id: str,
        decision: ApprovalDecision,
        *,
        response_model: type[BaseModel] | None = None,
    ) -> TaskResult:
        """Answer a pending request and run the task on to its end (``AgentKernel``'s)."""
        return self.call(
            self._kernel.resolve_approval, request_id, decision, response_model=response_model
        )

    def cancel(self, task_id: str, reason: str = "canceled by host") -> None:
        """Cancel a task wherever it runs (``AgentKernel.cancel_task``); any thread may.

        A thread blocked in ``execute_task`` (or iterating ``stream``) on that task gets its
        ``canceled`` result (or final event).
        """
        self.call(self._kernel.cancel_task, task_id, reason)

    def resume(self, task_id: str, *, response_model: type[BaseModel] | None = None) -> TaskResult:
        """Carry on a task whose process died (``AgentKernel.resume``)."""
        return self.call(self._kernel.resume, task_id, response_model=response_model)

    def retry_from_turn(self, session_id: str, turn: int, *, task: str | None = None) -> TaskResult:
        """Run turn ``turn`` of the session again and wait for it (``AgentKernel``'s)."""
        return self.call(self._kernel.retry_from_turn, session_id, turn, task=task)

    def fork_session(
        self,
        session_id: str,
        *,
        at_turn: int | None = None,
        new_session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """A new session holding ``session_id``'s history up to ``at_turn`` (``AgentKernel``'s)."""
        return self.call(
            self._kernel.fork_session,
            session_id,
            at_turn=at_turn,
            new_session_id=new_session_id,
            metadata=metadata,
        )

    def pending_approvals(self, limit: int = 1000) -> list[ApprovalRequest]:
        """Questions that tasks wait on, oldest first (they survive restarts)."""
        return self.call(self._kernel.pending_approvals, limit)

    def get_task(self, task_id: str) -> TaskState:
        """The stored task; ``TaskNotFoundError`` if there is none."""
        return self.call(self._kernel.get_task, task_id)

    def list_tasks(
        self, *, session_id: str | None = None, status: TaskStatus | None = None, limit: int = 50
    ) -> list[TaskState]:
        """Stored tasks, newest first."""
        return self.call(self._kernel.list_tasks, session_id=session_id, status=status, limit=limit)

    def task_events(self, task_id: str) -> list[TaskEvent]:
        """The persisted events of a task, in order."""
        return self.call(self._kernel.task_events, task_id)

    def task_spans(self, task_id: str) -> list[Span]:
        """The spans of a task, in start order."""
        return self.call(self._kernel.task_spans, task_id)

    def metrics(
        self, *, since: datetime | None = None, session_id: str | None = None
    ) -> AgentMetrics:
        """See ``AgentKernel.metrics``."""
        return self.call(self._kernel.metrics, since=since, session_id=session_id)

    # -- any coroutine -----------------------------------------------------------------------

    def call(self, func: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Await ``func(*args, **kwargs)`` on the loop thread and return what it returns.

        For any ``AgentKernel`` coroutine without a method here, e.g.
        ``sync.call(sync.kernel.session_transcript, session_id)``.
        """
        return self._wait(self._start(partial(func, *args, **kwargs))[1])

    def start(
        self, func: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> Future[T]:
        """Like ``call``, but return a future at once.

        Cancelling the future cancels the coroutine; closing the kernel cancels it too.

        E.g. from a GUI thread:
        ``sync.start(sync.kernel.resolve_approval, request_id, decision)``.
        """
        return self._start(partial(func, *args, **kwargs))[1]

    # -- callbacks ---------------------------------------------------------------------------

    def on_event(
        self, callback: Callable[[TaskEvent], object], *, task_id: str | None = None
    ) -> Subscription:
        """Call ``callback(event)`` on the dispatch thread for every event (or ``task_id``'s).

        Events come in the order they were published. ``cancel`` the returned subscription to
        stop. A callback that raises is logged; the next one still runs.
        """
        return self._add_listener(_Listener(callback, task_id))

    def on_approval_request(self, callback: Callable[[ApprovalRequest], object]) -> Subscription:
        """Call ``callback(request)`` on the dispatch thread whenever a task asks a human.

        Every request is announced, those an approval callback is asked about included: with
        none, this is how the host learns that a task waits for ``resolve_approval``.
        """

        def deliver(event: TaskEvent) -> None:
            assert isinstance(event, ApprovalRequested)
            callback(event.request)

        return self._add_listener(_Listener(deliver, event_type=ApprovalRequested))

    def set_approval_callback(self, callback: HostApprover | None) -> None:
        """Ask ``callback`` about risky calls from now on (see the class); ``None``: durably."""
        self._approval_callback = callback
        bridge = self._ask_host if callback is not None else None
        self.call(_set_approval_callback, self._kernel, bridge)

    # -- internals ---------------------------------------------------------------------------

    def _refuse_loop_thread(self, what: str) -> None:
        if threading.get_ident() == self._loop_thread:
            raise UsageError(
                f"SyncKernel.{what} cannot run on the kernel's own event-loop thread (it would "
                "wait on itself): in an async tool, hook or event handler, await the "
                "AgentKernel's methods (SyncKernel.kernel) instead"
            )

    def _start(self, func: Callable[[], Awaitable[T]]) -> tuple[_Call, Future[T]]:
        self._refuse_loop_thread("call")
        call = _Call()
        with self._lock:
            if self._closed:
                raise KernelClosedError(_CLOSED)
            self._calls.add(call)
        try:
            future: Future[T] = self._portal.start_task_soon(self._tracked, call, func)
        except BaseException:
            with self._lock:
                self._calls.discard(call)
            raise
        with self._lock:
            call.future = future
            stopped = call.stopped
        if stopped:
            future.cancel()
        return call, future

    def _stop(self, call: _Call) -> None:
        """Cancel ``call``'s coroutine (without waiting); any thread, the loop's included."""
        with self._lock:
            call.stopped = True
            future = call.future
        if future is not None:
            future.cancel()

    async def _tracked(self, call: _Call, func: Callable[[], Awaitable[T]]) -> T:
        try:
            return await func()
        finally:
            with self._lock:
                self._calls.discard(call)
            call.finished.set()

    def _wait(self, future: Future[T], timeout: float | None = None) -> T:
        try:
            return future.result(timeout)
        except CancelledError:
            if self._closed:
                raise KernelClosedError(
                    "the SyncKernel was closed while this call ran (its task, if it had "
                    "started, ended canceled)"
                ) from None
            raise

    def _add_listener(self, listener: _Listener) -> Subscription:
        with self._lock:
            self._listeners = (*self._listeners, listener)
        return _ListenerSubscription(self, listener)

    def _remove_listener(self, listener: _Listener) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

    def _publish(self, event: BaseModel) -> None:
        """The kernel bus's subscriber (loop thread): dispatch to the matching listeners."""
        if not isinstance(event, TaskEvent):
            return
        for listener in self._listeners:
            if (listener.task_id is None or listener.task_id == event.task_id) and isinstance(
                event, listener.event_type
            ):
                self._deliver(partial(listener.deliver, event))

    def _deliver(self, callback: Callable[[], object]) -> None:
        try:
            self._dispatch(partial(_run_logged, callback))
        except Exception:
            # After close the default thread takes no more callbacks; nothing is left to tell.
            log.warning("a SyncKernel callback could not be dispatched", exc_info=True)

    async def _ask_host(self, request: ApprovalRequest) -> ApprovalDecision:
        """The kernel's approval callback: ask the host's on the dispatch thread, and wait."""
        callback = self._approval_callback
        if callback is None:
            return denial(request, "the host removed its approval callback")
        answer: Future[ApprovalDecision] = Future()

        def ask() -> None:
            if answer.done():
                return  # withdrawn before the host was asked
            try:
                reply = callback(request)
            except Exception as exc:
                _fail(answer, exc)
                return
            if isinstance(reply, Future):
                _follow(answer, reply, request, self._deliver)
            else:
                _settle(answer, reply)

        self._deliver(ask)
        try:
            # A worker thread waits, so the loop never blocks and a cancel ends the wait.
            return await anyio.to_thread.run_sync(answer.result, abandon_on_cancel=True)
        finally:
            answer.cancel()


def _name_loop_thread() -> int:
    """Name the loop thread (for thread dumps and logs); its id."""
    threading.current_thread().name = LOOP_THREAD_NAME
    return threading.get_ident()


async def _set_approval_callback(kernel: AgentKernel, bridge: ApprovalCallback | None) -> None:
    """Set the kernel's approval callback, on the loop thread."""
    kernel.set_approval_callback(bridge)


def _settle(future: Future[T], result: T) -> None:
    """Complete ``future`` unless it was withdrawn meanwhile."""
    with suppress(InvalidStateError):
        future.set_result(result)


def _fail(future: Future[T], error: BaseException) -> None:
    """Fail ``future`` unless it was withdrawn meanwhile."""
    with suppress(InvalidStateError):
        future.set_exception(error)


def _follow(
    answer: Future[ApprovalDecision],
    reply: Future[ApprovalDecision],
    request: ApprovalRequest,
    deliver: Callable[[Callable[[], object]], None],
) -> None:
    """Complete ``answer`` from the host's ``reply``; withdraw ``reply`` if ``answer`` is."""

    def copy(done: Future[ApprovalDecision]) -> None:
        if done.cancelled():
            _settle(answer, denial(request, "the host cancelled the question"))
        elif (error := done.exception()) is not None:
            _fail(answer, error)
        else:
            _settle(answer, done.result())

    def withdraw(done: Future[ApprovalDecision]) -> None:
        if done.cancelled() and not reply.done():
            deliver(reply.cancel)

    reply.add_done_callback(copy)
    answer.add_done_callback(withdraw)


class TaskHandle(Generic[R]):
    """A task started by ``SyncKernel.submit``: its id now, its result when it ends.

    Every method may be called from any thread.
    """

    def __init__(self, owner: SyncKernel, task_id: str, call: _Call, future: Future[R]) -> None:
        self._owner = owner
        self._call = call
        self._future = future
        self.task_id = task_id
        """The task's id, known before the task is stored."""

    def result(self, timeout: float | None = None) -> R:
        """Wait for the result (as ``execute_task`` returns or raises it).

        Raises:
            TimeoutError: Not done within ``timeout`` seconds (the task goes on).
            KernelClosedError: The kernel was closed first.
            concurrent.futures.CancelledError: ``cancel`` stopped the task before it was
                stored.
        """
        return self._owner._wait(self._future, timeout)

    def done(self) -> bool:
        """Whether the result (or error) is there."""
        return self._future.done()

    def cancel(self, reason: str = "canceled by host") -> bool:
        """Cancel the task (it ends ``canceled``); ``False`` if its call had returned already.

        Blocks briefly while the kernel records the request. A task its call left waiting for
        a human is canceled with ``SyncKernel.cancel``.
        """
        if self._future.done():
            return False
        try:
            self._owner.cancel(self.task_id, reason)
        except TaskNotFoundError:
            # Not stored yet (it is being routed): stopping its call means it never runs.
            self._owner._stop(self._call)
        except InvalidTransitionError:
            return False
        return True

    def add_done_callback(self, callback: Callable[[TaskHandle[R]], object]) -> None:
        """Call ``callback(handle)`` on the dispatch thread once the result is there."""
        self._future.add_done_callback(lambda _: self._owner._deliver(partial(callback, self)))


@dataclass
class _End:
    """What ends an ``EventStream``'s queue: how its run ended."""

    error: BaseException | None = None
    stopped: bool = False


async def _pump(
    kernel: AgentKernel, request: TaskRequest, task_id: str, sink: SimpleQueue[AgentEvent | _End]
) -> None:
    """Run ``request``, its events into ``sink`` as published, then how it ended (loop thread).

    What ``AgentKernel.stream_task`` does, without its hop through a stream between tasks:
    the bus hands each event to the host's queue the moment it is published.
    """

    def forward(event: BaseModel) -> None:
        if isinstance(event, TaskEvent) and event.task_id == task_id:
            sink.put(cast(AgentEvent, event))

    subscription = kernel.event_bus.subscribe(None, forward)
    end = _End()
    try:
        await kernel.execute_task(request, task_id=task_id)
    except anyio.get_cancelled_exc_class():
        end.stopped = True  # the task ended canceled, as when a stream_task loop is left
        raise
    except Exception as exc:
        end.error = exc
    finally:
        subscription.cancel()
        sink.put(end)


class EventStream(Iterator[AgentEvent]):
    """The events of one task run by ``SyncKernel.stream``, as a blocking iterator.

    One thread iterates; ``close`` may come from any thread. Closing before the final event
    cancels the task and waits until it has ended ``canceled``.
    """

    def __init__(self, owner: SyncKernel, request: TaskRequest) -> None:
        self._owner = owner
        self.task_id = uuid.uuid4().hex
        """The task's id, known before the task is stored."""
        self._queue: SimpleQueue[AgentEvent | _End] = SimpleQueue()
        self._ended = False
        self._closing = False
        # The run holds the queue, not this object: dropping the stream can stop the run.
        self._call, _ = owner._start(
            partial(_pump, owner.kernel, request, self.task_id, self._queue)
        )

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> AgentEvent:
        if self._ended:
            raise StopIteration
        item = self._queue.get()
        if not isinstance(item, _End):
            return item
        self._ended = True
        if item.error is not None:
            raise item.error
        if item.stopped and not self._closing and self._owner.closed:
            raise KernelClosedError("the SyncKernel was closed while this stream ran")
        raise StopIteration

    def close(self) -> None:
        """Stop listening: cancel the task if it runs, and wait until it has ended."""
        self._owner._refuse_loop_thread("stream close")
        self._closing = True
        self._ended = True
        self._owner._stop(self._call)
        self._call.finished.wait()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped unclosed: stop the run without waiting (this may be any thread).
        call: _Call | None = getattr(self, "_call", None)
        if call is not None and not call.finished.is_set():
            self._owner._stop(call)
