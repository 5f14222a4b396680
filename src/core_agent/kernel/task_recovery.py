"""Finding the tasks whose process died, and carrying them on or failing them.

A task is orphaned when it is ``queued`` or ``running`` and its lease ran out, or its owner
is a process of this machine that no longer exists (``owner_is_dead``): such a task's lease
is given up at once rather than when it runs out. Recovery takes the orphans over one batch
at a time and either resumes each (``AgentKernel.resume``) or ends it ``failed`` saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

import anyio

from core_agent.contracts.errors import (
    CorruptStateError,
    DefinitionNotLoadedError,
    InvalidTransitionError,
    ResponseModelError,
    UsageError,
)
from core_agent.contracts.event_bus import IEventBus
from core_agent.contracts.executor import RunStats
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore
from core_agent.kernel.task_driver import TaskDriver
from core_agent.kernel.task_events import TaskEventLog, now
from core_agent.kernel.task_lease import lease_until, owner_is_dead
from core_agent.kernel.task_lifecycle import TaskLifecycle
from shared.agent_protocol import (
    TaskEvent,
    TaskFailed,
    TaskResult,
    TaskState,
    TaskStatus,
    ToolCompleted,
    ToolStarted,
)

log = logging.getLogger(__name__)

RECOVER_AT_ONCE = 4
"""Orphans taken over at the same time."""
BATCH = 100


class TaskRecovery:
    """Recovers the orphaned tasks of a task store for the kernel ``owner`` (see the module)."""

    def __init__(
        self,
        *,
        task_store: ITaskStore,
        event_bus: IEventBus,
        driver: TaskDriver,
        owner: str,
        lease_s: float,
        resume: Callable[[str], Awaitable[TaskResult]],
        trace_store: ITraceStore | None = None,
        ended_unrun: Callable[[TaskState, TaskStatus, str | None], Awaitable[None]] | None = None,
    ) -> None:
        """Recovery for ``owner``.

        ``ended_unrun`` writes what else a task failed here stores with its end (its
        session's turn).
        """
        self._task_store = task_store
        self._ended_unrun = ended_unrun
        self._trace_store = trace_store
        self._event_bus = event_bus
        self._driver = driver
        self._owner = owner
        self._lease_s = lease_s
        self._resume = resume

    async def recover(self, how: Literal["resume", "fail"]) -> list[TaskResult]:
        """Resume or fail every orphaned task; the results in the order the tasks ended.

        A task another kernel takes first is left to it, and a task whose stored state is
        damaged is logged and left: the others are recovered all the same.
        """
        results: list[TaskResult] = []
        tried: set[str] = set()
        limiter = anyio.CapacityLimiter(RECOVER_AT_ONCE)
        for status in (TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL):
            for state in await self._task_store.list_tasks(status=status, limit=1000):
                if not self._driver.runs(state.task_id):
                    await self.free_if_owner_died(state)

        async def take(state: TaskState) -> None:
            async with limiter:
                self._driver.recovering.add(state.task_id)
                try:
                    if how == "fail":
                        result = await self._fail_orphan(state)
                    else:
                        result = await self._resume(state.task_id)
                except (ResponseModelError, DefinitionNotLoadedError) as exc:
                    # Left running for a host that has the model (``resume(response_model=)``)
                    # or the definition (a workflow registered by name).
                    log.warning("task %s is not recovered here: %s", state.task_id, exc)
                    return
                except UsageError:
                    return  # taken over by another kernel, or ended meanwhile
                except CorruptStateError as exc:
                    log.error("task %s cannot be recovered: %s", state.task_id, exc)
                    return
                except Exception:
                    # A bug in its run (already recorded as its failure) or a storage fault:
                    # that task alone; the others recovered with it go on.
                    log.exception("recovering task %s failed", state.task_id)
                    return
                finally:
                    self._driver.recovering.discard(state.task_id)
                results.append(result)

        while True:
            orphans = [
                state
                # Past the ones tried already: those left here (a tool or a definition this
                # process lacks) would otherwise fill every batch and hide the newer ones.
                for state in await self._task_store.orphaned_tasks(
                    now=now(), limit=BATCH + len(tried)
                )
                if state.task_id not in tried and not self._driver.runs(state.task_id)
            ]
            if not orphans:
                return results
            tried.update(state.task_id for state in orphans)
            async with anyio.create_task_group() as group:
                for state in orphans:
                    group.start_soon(take, state)

    async def free_if_owner_died(self, state: TaskState) -> TaskState:
        """``state``, with its lease given up if its owner is a process here that died.

        A crashed host's tasks are free at once rather than when their leases run out.
        """
        if (
            state.owner is None
            or state.owner == self._owner
            or state.lease_expires_at is None
            or state.lease_expires_at <= now()
            or not owner_is_dead(state.owner)
        ):
            return state
        await self._task_store.release_lease(state.task_id, owner=state.owner)
        return await self._task_store.get_task(state.task_id)

    async def _fail_orphan(self, state: TaskState) -> TaskResult:
        """End a task whose process died as ``failed``, saying so."""
        if not self._driver.claim(state.task_id):
            raise UsageError(f"task {state.task_id} runs in this kernel")
        try:
            if not await self._task_store.acquire_lease(
                state.task_id, owner=self._owner, until=lease_until(self._lease_s)
            ):
                raise UsageError(f"task {state.task_id} is running in a live process")
            events = TaskEventLog.continued(
                self._task_store,
                self._event_bus,
                state.task_id,
                await self._task_store.list_events(state.task_id),
            )
            lifecycle = TaskLifecycle(
                task_store=self._task_store,
                events=events,
                state=state,
                owner=self._owner,
                lease_s=self._lease_s,
                trace_store=self._trace_store,
            )
            error = "the process running this task stopped before it ended (AGENT_RECOVERY=fail)"
            stats = RunStats(usage=state.usage)
            ended_unrun = self._ended_unrun

            async def session_turn() -> None:
                if ended_unrun is not None:
                    await ended_unrun(state, TaskStatus.FAILED, error)

            try:
                await lifecycle.move(
                    state.status,
                    TaskStatus.FAILED,
                    events.make(
                        TaskFailed, error=error, error_type="ProcessLost", usage=state.usage
                    ),
                    then=session_turn,
                    error=error,
                )
            except InvalidTransitionError as exc:
                raise UsageError(str(exc)) from exc
            return lifecycle.result(TaskStatus.FAILED, stats, error=error, error_type="ProcessLost")
        finally:
            self._driver.unclaim(state.task_id)


def unfinished_tools(events: Sequence[TaskEvent]) -> set[str]:
    """The tools of the calls ``events`` show started and not completed.

    A task left while such a call ran may only be resumed where that tool is: the call may
    or may not have happened, and only the ledger of a run that has the tool can ask a
    human about it (elsewhere it would be answered "unknown tool" and the run would go on).
    """
    # By id and tool: parallel plan steps each number their calls from the same ids.
    running: set[tuple[str, str]] = set()
    for event in events:
        if isinstance(event, ToolStarted):
            running.add((event.tool_call.id, event.tool_call.name))
        elif isinstance(event, ToolCompleted):
            running.discard((event.result.call_id, event.result.name))
    return {name for _, name in running}
