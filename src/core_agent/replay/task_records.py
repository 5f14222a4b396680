"""A data directory's task records: read a task's trajectory, compare, export, import.

Only the task and trace stores are opened (no model, no tools, no sandbox), and without
the container, whose import (every layer of the kernel) would be most of the time a
command takes to replay a task. Imports are written through the redacting stores, as the
kernel's writes are.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from core_agent.contracts.errors import TaskNotFoundError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.trace_store import ITraceStore
from core_agent.kernel.task_references import find_task_id
from core_agent.replay.comparison import TrajectoryComparison, compare_trajectories
from core_agent.replay.task_export import IMPORTED, ExportReader, TaskExport, export_lines
from core_agent.replay.trajectory import Trajectory, build_trajectory

T = TypeVar("T")


def open_store(group: str, name: str, settings: AgentSettings, port: type[T]) -> T:
    """The store the entry point ``name`` of ``group`` builds from ``settings``.

    Looked up directly, for speed; anything unusual (an unknown name, an entry point that
    builds something else) goes to the container's loader, which says what is wrong.
    """
    from importlib.metadata import entry_points

    found = [entry for entry in entry_points(group=group) if entry.name == name]
    if len(found) == 1:
        factory = found[0].load()
        store = factory if isinstance(factory, port) else factory(settings)
        if isinstance(store, port):
            return store
    from core_agent.container import load_provider

    return load_provider(group, name, settings, port)


@dataclass(frozen=True, slots=True)
class ImportedTask:
    """What ``TaskRecords.import_export`` stored."""

    task_id: str
    events: int
    spans: int


class TaskRecords:
    """The stored tasks of one data directory (``AGENT_DATA_DIR``), as an async context manager.

    The configured stores (``AGENT_TASK_STORE``, ``AGENT_TRACE_STORE``) are opened on entry
    and closed on exit, unless a host passes its own (``task_store``, ``trace_store``), which
    it closes itself.
    """

    def __init__(
        self,
        settings: AgentSettings | None = None,
        *,
        task_store: ITaskStore | None = None,
        trace_store: ITraceStore | None = None,
    ) -> None:
        self._settings = settings
        self._given = (task_store, trace_store)
        self._tasks: ITaskStore | None = None
        self._traces: ITraceStore | None = None

    @property
    def settings(self) -> AgentSettings:
        """The settings the stores come from (``AGENT_*`` when none were given)."""
        if self._settings is None:
            self._settings = AgentSettings()
        return self._settings

    async def __aenter__(self) -> TaskRecords:
        tasks, traces = self._given
        settings = self.settings
        try:
            self._tasks = tasks or open_store(
                "core_agent.task_stores",
                settings.task_store,
                settings,
                ITaskStore,  # type: ignore[type-abstract]
            )
            self._traces = traces or open_store(
                "core_agent.trace_stores",
                settings.trace_store,
                settings,
                ITraceStore,  # type: ignore[type-abstract]
            )
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the stores this opened."""
        tasks, traces, self._tasks, self._traces = self._tasks, self._traces, None, None
        if tasks is not None and tasks is not self._given[0]:
            await tasks.close()
        if traces is not None and traces is not self._given[1]:
            await traces.close()

    def _stores(self) -> tuple[ITaskStore, ITraceStore]:
        if self._tasks is None or self._traces is None:
            raise UsageError("TaskRecords is used inside `async with TaskRecords(...)`")
        return self._tasks, self._traces

    async def find(self, reference: str) -> str:
        """The id of the task ``reference`` names (an id, a prefix, a trace id, ``last``).

        Raises:
            TaskNotFoundError: Nothing matches.
            UsageError: A prefix several tasks share.
        """
        return await find_task_id(self._stores()[0], reference)

    async def load(self, reference: str) -> TaskExport:
        """The task ``reference`` names, with its events and spans.

        Raises:
            TaskNotFoundError: Nothing matches.
            CorruptStateError: A stored event cannot be read.
        """
        tasks, traces = self._stores()
        task = await tasks.get_task(await self.find(reference))
        events = await tasks.list_events(task.task_id)
        spans = await traces.list_spans(task_id=task.task_id)
        return TaskExport(task, list(events), spans)

    async def trajectory(self, reference: str) -> Trajectory:
        """The task's trajectory, from its records alone (see ``trajectory``)."""
        loaded = await self.load(reference)
        return build_trajectory(loaded.task, loaded.events, loaded.spans)

    async def compare(self, a: str, b: str) -> TrajectoryComparison:
        """Compare two tasks step by step (see ``comparison``)."""
        return compare_trajectories(await self.trajectory(a), await self.trajectory(b))

    async def export(self, reference: str) -> Iterator[str]:
        """The task as JSON lines (see ``task_export``), without line ends.

        Raises:
            UsageError: The task has not ended (its records are still being written).
        """
        from core_agent import __version__

        loaded = await self.load(reference)
        status = loaded.task.status
        if not status.is_terminal:
            raise UsageError(
                f"task {loaded.task.task_id} is {status.value}: export it once it has ended "
                f"(or cancel it: core-agent cancel {loaded.task.task_id})"
            )
        return export_lines(loaded, version=__version__)

    async def import_export(
        self, lines: Iterable[str], *, source: str = "the export"
    ) -> ImportedTask:
        """Store the task an export holds, with the ids it has; all of it or nothing.

        The task keeps its id, events and spans; who ran it (owner, lease) is not carried
        over. ``source`` names the file in error messages.

        Raises:
            UsageError: The lines are no complete export (one line says where), hold records
                that cannot be stored, or this data directory already has the task.
            StorageError: Storing failed; nothing was stored.
        """
        from core_agent.container import build_redactor
        from core_agent.safety.redacting_stores import RedactingTaskStore, RedactingTraceStore

        stored_tasks, stored_traces = self._stores()
        export = ExportReader(source).read(lines)
        redactor = build_redactor(self.settings)
        tasks = RedactingTaskStore(stored_tasks, redactor)
        traces = RedactingTraceStore(stored_traces, redactor)
        # Marked here, whatever the file says: what it recorded is another machine's (or
        # anyone's) word, never run for real as it stands (see rerun and fork).
        request = export.task.request
        request = request.model_copy(update={"metadata": {**request.metadata, IMPORTED: True}})
        task = export.task.model_copy(
            update={
                "owner": None,
                "lease_expires_at": None,
                "cancel_requested": None,
                "request": request,
            }
        )
        try:
            await tasks.get_task(task.task_id)
        except TaskNotFoundError:
            pass
        else:
            raise UsageError(
                f"task {task.task_id} is already in this data directory (imported before?)"
            )
        if await tasks.match_task_ids(task.trace_id, limit=1):
            raise UsageError(
                f"trace id {task.trace_id} is already another task's in this data directory: "
                "the file is a copy of a task here, edited"
            )
        try:
            # Nothing of it if any of it fails: a unit of work would keep what was written.
            async with tasks.all_or_nothing():
                await tasks.insert_task(task, export.events)
                for span in export.spans:
                    await traces.record(span)
        except (RecursionError, OverflowError, ValueError) as exc:
            # A record the reader's checks let through that cannot be prepared or stored
            # here: the file's fault, and nothing of it was stored.
            raise UsageError(
                f"{source}: cannot be stored ({type(exc).__name__}: {exc}); nothing was stored"
            ) from exc
        return ImportedTask(task.task_id, len(export.events), len(export.spans))
