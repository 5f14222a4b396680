"""``ITaskStore`` on SQLite: sessions, tasks and their event log in one database.

Approval requests are also rows of ``agent_approvals``, written with the events that record
them (``approval.requested`` adds a pending row, ``approval.resolved`` decides it), so pending
requests are one query and a decision is taken at most once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from pydantic import TypeAdapter, ValidationError

from core_agent.contracts.errors import (
    CorruptStateError,
    InvalidTransitionError,
    LeaseLostError,
    TaskHeldError,
    TaskNotFoundError,
    UsageError,
)
from core_agent.contracts.metrics import (
    KERNEL_DECIDER,
    ApprovalMetrics,
    MetricsScope,
    TaskCounts,
    TaskMetrics,
)
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.task_store import ApprovalDecided, ApprovalRecord, ITaskStore, TaskPage
from providers.sqlite.database import ReaderPool, SqliteDatabase, transaction
from providers.sqlite.metrics_queries import (
    grouped_percentiles,
    milliseconds_between,
    percentiles,
    read_snapshot,
    task_condition,
)
from providers.sqlite.session_store import (
    SqliteSessionStore,
    check_session_takes_a_task,
    supersede_turns,
)
from shared.agent_protocol import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    TaskEvent,
    TaskRequest,
    TaskState,
    TaskStatus,
    TokenUsage,
)

_EVENTS: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)

_TASK_COLUMNS = (
    "id, session_id, trace_id, status, strategy, input_json, output_json, error_text, "
    "usage_json, created_at, updated_at, tainted, sandbox_json, owner, lease_expires_at, "
    "cancel_requested, response_schema_json, response_model"
)
_ACTIVE = ("queued", "running")
_HELD = ("queued", "running", "waiting_approval")
"""Statuses in which a task keeps its owner (a host asking its approver holds its task)."""
_ENDED = ("succeeded", "failed", "canceled")
_STATUSES = frozenset(status.value for status in TaskStatus)

log = logging.getLogger(__name__)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _row_to_task(row: tuple[Any, ...]) -> TaskState:
    try:
        return _task(row)
    except (ValueError, ValidationError) as exc:
        raise CorruptStateError(row[0], f"its row cannot be read: {exc}") from exc


def _readable_tasks(rows: Iterable[tuple[Any, ...]]) -> list[TaskState]:
    """The tasks of ``rows``, leaving out (and logging) those that cannot be read.

    One damaged row must not hide the other tasks from a listing or from recovery;
    ``get_task`` still names it with a ``CorruptStateError``.
    """
    tasks = []
    for row in rows:
        try:
            tasks.append(_row_to_task(row))
        except CorruptStateError as exc:
            log.error("%s (left out of the listing)", exc)
    return tasks


def _task(row: tuple[Any, ...]) -> TaskState:
    (
        task_id,
        session_id,
        trace_id,
        status,
        strategy,
        input_json,
        output_json,
        error,
        usage_json,
        created_at,
        updated_at,
        tainted,
        sandbox_json,
        owner,
        lease_expires_at,
        cancel_requested,
        response_schema_json,
        response_model,
    ) = row
    return TaskState(
        task_id=task_id,
        session_id=session_id,
        trace_id=trace_id,
        status=TaskStatus(status),
        request=TaskRequest.model_validate_json(input_json),
        strategy=strategy,
        output=json.loads(output_json) if output_json is not None else None,
        error=error,
        usage=TokenUsage.model_validate_json(usage_json),
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
        tainted=bool(tainted),
        sandbox=json.loads(sandbox_json) if sandbox_json else None,
        owner=owner,
        lease_expires_at=datetime.fromisoformat(lease_expires_at) if lease_expires_at else None,
        cancel_requested=cancel_requested,
        response_schema=json.loads(response_schema_json) if response_schema_json else None,
        response_model=response_model,
    )


def _text_filter(text: str) -> tuple[str, list[str]]:
    """The condition on a task's request text and output for ``page_tasks``, and its values.

    It compares the decoded values, not the stored JSON, whose escapes (quotes, newlines,
    non-ASCII output) would not match what a person types. Decoding every row is slow, so
    when the stored JSON must hold the text as typed (no character JSON escapes: the request
    is written with non-ASCII as it is, the output with it escaped), a plain ``LIKE`` on the
    JSON first rules out the rows that cannot match. A text with a NUL is found as typed,
    letter case included.
    """
    if "\0" in text:
        # LIKE reads its pattern only up to a NUL ("%": every row); instr reads it whole, as
        # it is (case and all).
        found = "instr(json_extract(input_json, '$.task'), ?) > 0"
        return f"({found} OR instr(json_extract(output_json, '$'), ?) > 0)", [text, text]
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    like = "LIKE ? ESCAPE '\\'"
    in_task = f"json_extract(input_json, '$.task') {like}"
    in_output = f"json_extract(output_json, '$') {like}"
    if not any(char in '"\\' or char < " " for char in text):  # escaped in any JSON
        in_task = f"(input_json {like} AND {in_task})"
        if all(" " <= char <= "~" for char in text):  # json.dumps escapes the rest
            in_output = f"(output_json {like} AND {in_output})"
    clause = f"({in_task} OR {in_output})"
    return clause, [pattern] * clause.count("?")


def _cursor_position(cursor: str) -> tuple[str, int]:
    """The ``created_at`` and rowid a page cursor (``page_tasks``) stands for."""
    created_at, _, rowid = cursor.rpartition("/")
    try:
        datetime.fromisoformat(created_at)
        return created_at, int(rowid)
    except ValueError:
        raise UsageError(
            f"not a page cursor of this task list: {cursor!r} (start again from the first page)"
        ) from None


def _insert_task(conn: sqlite3.Connection, task: TaskState) -> None:
    """Insert the task's row, and its session's if new."""
    created = _iso(task.created_at)
    conn.execute(
        "INSERT INTO agent_sessions (id, created_at, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at",
        (task.session_id, created, created),
    )
    conn.execute(
        f"INSERT INTO agent_tasks ({_TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            task.task_id,
            task.session_id,
            task.trace_id,
            task.status.value,
            task.strategy,
            task.request.model_dump_json(),
            json.dumps(task.output) if task.output is not None else None,
            task.error,
            task.usage.model_dump_json(),
            created,
            _iso(task.updated_at),
            int(task.tainted),
            json.dumps(task.sandbox) if task.sandbox is not None else None,
            task.owner,
            _iso(task.lease_expires_at) if task.lease_expires_at else None,
            task.cancel_requested,
            (json.dumps(task.response_schema) if task.response_schema is not None else None),
            task.response_model,
        ),
    )


def _insert_event(conn: sqlite3.Connection, event: TaskEvent) -> None:
    conn.execute(
        "INSERT INTO agent_task_events (id, task_id, seq, event_type, payload_json, occurred_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            event.event_id,
            event.task_id,
            event.seq,
            event.kind,
            event.model_dump_json(),
            _iso(event.occurred_at),
        ),
    )
    if event.kind == "task.tainted":
        conn.execute("UPDATE agent_tasks SET tainted = 1 WHERE id = ?", (event.task_id,))
    elif isinstance(event, ApprovalRequested):
        conn.execute(
            "INSERT OR IGNORE INTO agent_approvals"
            " (request_id, task_id, status, request_json, created_at)"
            " VALUES (?, ?, 'pending', ?, ?)",
            (
                event.request.request_id,
                event.task_id,
                event.request.model_dump_json(),
                _iso(event.request.created_at),
            ),
        )
    elif isinstance(event, ApprovalResolved):
        _mark_decided(conn, event)


def _mark_decided(conn: sqlite3.Connection, event: ApprovalResolved) -> bool:
    """Decide the request's row if it is still pending; whether it was."""
    decision = event.decision
    cursor = conn.execute(
        "UPDATE agent_approvals SET status = ?, decision_json = ?, decided_at = ?"
        " WHERE request_id = ? AND status = 'pending'",
        (
            "approved" if decision.approved else "denied",
            decision.model_dump_json(),
            _iso(event.occurred_at),
            decision.request_id,
        ),
    )
    return cursor.rowcount > 0


class _Followed:
    """What follows from a status move, held apart while it ran, to apply after the move.

    Each write in a savepoint of its own: one that fails is logged and left out, the move and
    the others stand. The ``after_commit`` callbacks run once the move is durable, except
    those that follow a write left out (an event not stored is not heard of).
    """

    def __init__(
        self,
        writes: Sequence[Callable[[sqlite3.Connection], None]] = (),
        callbacks: Sequence[Callable[[], Awaitable[None]]] = (),
        owners: Sequence[int] | None = None,
    ) -> None:
        self._writes = writes
        self._callbacks = list(zip(callbacks, owners or (), strict=True))
        self._skipped: set[int] = set()

    def apply(self, conn: sqlite3.Connection, what: str) -> None:
        """Apply the writes inside the move's transaction (again, if it is retried)."""
        self._skipped.clear()
        for index, fn in enumerate(self._writes):
            conn.execute("SAVEPOINT followed")
            try:
                fn(conn)
            except Exception:
                conn.execute("ROLLBACK TO followed")
                self._skipped.add(index)
                log.exception("%s failed", what)
            conn.execute("RELEASE followed")

    async def published(self) -> None:
        """Run the callbacks of the writes that were stored (after the commit)."""
        for callback, owner in self._callbacks:
            if owner not in self._skipped:
                await callback()


class SqliteTaskStore(ITaskStore):
    """Tasks in ``agent_tasks``, events in ``agent_task_events``, sessions in ``agent_sessions``."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)
        self._readers = ReaderPool(path)  # connects on first use: only stats read here

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteTaskStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """See ``ITaskStore.unit_of_work``: one transaction on the shared database."""
        async with self._db.unit_of_work():
            yield

    @contextlib.asynccontextmanager
    async def all_or_nothing(self) -> AsyncIterator[None]:
        """See ``ITaskStore.all_or_nothing``: held apart, then one transaction (or none)."""
        async with self._db.all_or_nothing():
            yield

    async def flush(self) -> None:
        """See ``ITaskStore.flush``."""
        await self._db.flush()

    def independent_work(self) -> contextlib.AbstractContextManager[None]:
        """See ``ITaskStore.independent_work``."""
        return self._db.independent_work()

    def hand_over(self) -> bool:
        """See ``ITaskStore.hand_over``."""
        return self._db.hand_over()

    def fenced(self, task_id: str, owner: str) -> contextlib.AbstractContextManager[None]:
        """See ``ITaskStore.fenced``: the owner is read in each transaction of the block."""

        def still_ours(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT owner FROM agent_tasks WHERE id = ?", (task_id,)).fetchone()
            holder = row[0] if row is not None else None
            if holder != owner:
                raise LeaseLostError(task_id, holder)

        return self._db.fenced(still_ours)

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """See ``ITaskStore.after_commit``."""
        return self._db.after_commit(callback)

    async def create_task(
        self,
        task: TaskState,
        queued_event: TaskEvent,
        *,
        exclusive: bool = False,
        supersede_turn: int | None = None,
    ) -> None:
        """Insert the session if new, the task, and its first event, in one transaction.

        With ``exclusive`` the session's open tasks are checked in that transaction
        (``BEGIN IMMEDIATE`` holds the write lock), so the check cannot race another writer;
        a retry's superseded turns are marked in it too (``supersede_turns``); the open unit
        of work's writes so far commit in it too (``SqliteDatabase.commit_with``). Without,
        the writes join the open unit (``SqliteDatabase.write``).
        """

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                if exclusive:
                    check_session_takes_a_task(conn, task.session_id)
                if supersede_turn is not None:
                    supersede_turns(conn, task.session_id, supersede_turn, task.task_id)
                _insert_task(conn, task)
                _insert_event(conn, queued_event)

        if exclusive or supersede_turn is not None:
            await self._db.commit_with(write)
        else:
            await self._db.write(write)

    async def insert_task(self, task: TaskState, events: Sequence[TaskEvent]) -> None:
        """See ``ITaskStore.insert_task``: one transaction (the open unit of work's, if any)."""

        def write(conn: sqlite3.Connection) -> None:
            _insert_task(conn, task)
            for event in events:
                _insert_event(conn, event)

        await self._db.write(write)

    def session_store(self) -> SqliteSessionStore:
        """See ``ITaskStore.session_store``: sessions in this store's database."""
        return SqliteSessionStore(self._db.path)

    async def get_task(self, task_id: str) -> TaskState:
        """The task, or ``TaskNotFoundError``."""

        def read(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM agent_tasks WHERE id = ?", (task_id,)
            ).fetchone()
            return row

        row = await self._db.run(read)
        if row is None:
            raise TaskNotFoundError(task_id)
        return _row_to_task(row)

    async def list_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        limit: int = 50,
    ) -> list[TaskState]:
        """Newest first, filtered by session and status when given."""
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            clauses.append("status = ?")
            params.append(status.value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            # The limit in the text, not bound: a bound LIMIT has SQLite prepare the
            # statement again at every execution (see ``SqliteMemoryStore.search``).
            return conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM agent_tasks {where}"
                f" ORDER BY created_at DESC, rowid DESC LIMIT {max(1, int(limit))}",
                params,
            ).fetchall()

        return _readable_tasks(await self._db.run(read))

    async def page_tasks(
        self,
        *,
        session_id: str | None = None,
        status: TaskStatus | None = None,
        text: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> TaskPage:
        """See ``ITaskStore.page_tasks``: a range on an index by creation time.

        The cursor is the last task's ``created_at`` and rowid; ``(created_at, rowid) < (?, ?)``
        is a range the index by creation time (by status, by session) answers, whose entries
        end with the rowid. A text filter reads each row's request text and output, newest
        first, until the page is full. A row that cannot be read is left out (and logged), so
        one damaged task does not hide the others.
        """
        clauses: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            clauses.append("status = ?")
            params.append(status.value)
        if text:
            clause, patterns = _text_filter(text)
            clauses.append(clause)
            params += patterns
        if cursor is not None:
            clauses.append("(created_at, rowid) < (?, ?)")
            params += _cursor_position(cursor)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        size = max(1, limit)

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            # One row more than the page says whether another page follows.
            return conn.execute(
                f"SELECT rowid, {_TASK_COLUMNS} FROM agent_tasks {where}"
                f" ORDER BY created_at DESC, rowid DESC LIMIT {int(size) + 1}",
                params,
            ).fetchall()

        rows = await self._db.run(read)
        tasks = _readable_tasks(row[1:] for row in rows[:size])
        last = rows[size - 1] if len(rows) > size else None
        return TaskPage(tasks, f"{last[10]}/{last[0]}" if last is not None else None)

    async def match_task_ids(self, reference: str, *, limit: int = 10) -> list[str]:
        """Ids starting with ``reference`` (a range on the primary key), else by trace id."""
        if not reference:
            return []

        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT id FROM agent_tasks WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (reference, reference + "\U0010ffff", max(1, limit)),
            ).fetchall()
            if not rows:
                rows = conn.execute(
                    "SELECT id FROM agent_tasks WHERE trace_id = ? ORDER BY id LIMIT ?",
                    (reference, max(1, limit)),
                ).fetchall()
            return [str(row[0]) for row in rows]

        return await self._db.run(read)

    async def transition(
        self,
        task_id: str,
        *,
        from_status: TaskStatus,
        to_status: TaskStatus,
        event: TaskEvent | None = None,
        strategy: str | None = None,
        output: str | None = None,
        error: str | None = None,
        usage: TokenUsage | None = None,
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Compare-and-set the status, update the outcome fields, append the event: atomically.

        One transaction with what the open unit of work holds so far (``commit_with``), and
        with what ``then`` writes, held apart while it runs and applied after the move, each
        write in a savepoint of its own (see ``ITaskStore.transition``).
        """
        now = _iso(datetime.now(UTC))

        def move(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                cursor = conn.execute(
                    "UPDATE agent_tasks SET status = ?, updated_at = ?,"
                    " owner = CASE WHEN ? THEN NULL ELSE owner END,"
                    " lease_expires_at = CASE WHEN ? THEN NULL ELSE lease_expires_at END,"
                    " cancel_requested = CASE WHEN ? THEN NULL ELSE cancel_requested END,"
                    " strategy = COALESCE(?, strategy),"
                    " output_json = COALESCE(?, output_json),"
                    " error_text = COALESCE(?, error_text),"
                    " usage_json = COALESCE(?, usage_json)"
                    " WHERE id = ? AND status = ?",
                    (
                        to_status.value,
                        now,
                        to_status.value not in _HELD,
                        to_status.value not in _HELD,
                        # A cancel asked for while a task waits for a human is carried out
                        # when it runs again: only an ended task forgets it.
                        to_status.value not in _HELD,
                        strategy,
                        json.dumps(output) if output is not None else None,
                        error,
                        usage.model_dump_json() if usage is not None else None,
                        task_id,
                        from_status.value,
                    ),
                )
                if cursor.rowcount == 0:
                    row = conn.execute(
                        "SELECT status FROM agent_tasks WHERE id = ?", (task_id,)
                    ).fetchone()
                    if row is None:
                        raise TaskNotFoundError(task_id)
                    raise InvalidTransitionError(task_id, row[0], to_status.value)
                if event is not None:
                    _insert_event(conn, event)

        if then is None:
            await self._db.commit_with(move)
            return
        failure: BaseException | None = None
        with self._db.held_apart() as held:
            try:
                await then()
            except BaseException as exc:  # the move and what came before it stand
                failure = exc
        followed = _Followed(held.writes, held.after_commit, held.owners)

        def write(conn: sqlite3.Connection) -> None:
            move(conn)
            followed.apply(conn, f"task {task_id}: a write after its move")

        # Shielded: the move is applied whatever happens to the caller meanwhile, and who
        # watches hears of it; not of an event whose write was skipped (it is not stored).
        with anyio.CancelScope(shield=True):
            await self._db.commit_with(write)
            await followed.published()
        if failure is not None:
            raise failure

    async def append_event(self, event: TaskEvent) -> None:
        """Append one event to its task's log (with the open unit of work, if any)."""

        def write(conn: sqlite3.Connection) -> None:
            _insert_event(conn, event)

        await self._db.write(write)

    async def list_events(self, task_id: str) -> Sequence[TaskEvent]:
        """The task's events in ``seq`` order."""

        def read(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            return conn.execute(
                "SELECT seq, payload_json FROM agent_task_events WHERE task_id = ? ORDER BY seq",
                (task_id,),
            ).fetchall()

        events = []
        for seq, payload in await self._db.run(read):
            try:
                events.append(_EVENTS.validate_json(payload))
            except ValidationError as exc:
                raise CorruptStateError(task_id, f"event {seq} cannot be read: {exc}") from exc
        return events

    async def acquire_lease(self, task_id: str, *, owner: str, until: datetime) -> bool:
        """Compare-and-set the owner: free, already ours, or expired."""
        now, deadline = _iso(datetime.now(UTC)), _iso(until)

        def write(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE agent_tasks SET owner = ?, lease_expires_at = ? WHERE id = ? AND"
                " (owner IS NULL OR owner = ? OR lease_expires_at IS NULL"
                " OR lease_expires_at < ?)",
                (owner, deadline, task_id, owner, now),
            )
            if cursor.rowcount:
                return True
            if conn.execute("SELECT 1 FROM agent_tasks WHERE id = ?", (task_id,)).fetchone():
                return False
            raise TaskNotFoundError(task_id)

        return await self._db.run(write)

    async def renew_leases(
        self, owner: str, task_ids: Sequence[str], *, until: datetime
    ) -> set[str]:
        """One statement for all of them; returns those still ours."""
        if not task_ids:
            return set()
        ids = list(task_ids)
        marks = ",".join("?" * len(ids))

        def write(conn: sqlite3.Connection) -> set[str]:
            with transaction(conn):
                conn.execute(
                    f"UPDATE agent_tasks SET lease_expires_at = ?"
                    f" WHERE owner = ? AND id IN ({marks})",
                    (_iso(until), owner, *ids),
                )
                rows = conn.execute(
                    f"SELECT id FROM agent_tasks WHERE owner = ? AND id IN ({marks})",
                    (owner, *ids),
                ).fetchall()
            return {row[0] for row in rows}

        return await self._db.run(write)

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        """Clear owner and lease if ``owner`` holds them."""
        await self._db.run(
            lambda conn: conn.execute(
                "UPDATE agent_tasks SET owner = NULL, lease_expires_at = NULL"
                " WHERE id = ? AND owner = ?",
                (task_id, owner),
            )
        )

    async def orphaned_tasks(self, *, now: datetime, limit: int = 100) -> list[TaskState]:
        """Queued or running tasks without a live lease, oldest first.

        Up to ``limit`` readable ones: unreadable rows are skipped (logged) without counting,
        so old damaged rows cannot fill every batch and hide the newer orphans.
        """

        def read(conn: sqlite3.Connection) -> list[TaskState]:
            cursor = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM agent_tasks WHERE status IN (?, ?) AND"
                " (lease_expires_at IS NULL OR lease_expires_at < ?)"
                " ORDER BY created_at, rowid",
                (*_ACTIVE, _iso(now)),
            )
            found: list[TaskState] = []
            while len(found) < max(1, limit):
                rows = cursor.fetchmany(max(1, limit) - len(found))
                if not rows:
                    break
                found += _readable_tasks(rows)
            return found

        return await self._db.run(read)

    async def request_cancel(self, task_id: str, reason: str) -> None:
        """Record the request on the task's row."""

        def write(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE agent_tasks SET cancel_requested = ? WHERE id = ?", (reason, task_id)
            )
            if cursor.rowcount == 0:
                raise TaskNotFoundError(task_id)

        await self._db.run(write)

    async def cancel_requests(self, task_ids: Sequence[str]) -> dict[str, str]:
        """Requests among ``task_ids``."""
        if not task_ids:
            return {}
        ids = list(task_ids)
        marks = ",".join("?" * len(ids))

        def read(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            return conn.execute(
                f"SELECT id, cancel_requested FROM agent_tasks"
                f" WHERE id IN ({marks}) AND cancel_requested IS NOT NULL",
                ids,
            ).fetchall()

        return dict(await self._db.run(read))

    async def pending_approvals(self, *, limit: int = 1000) -> list[ApprovalRequest]:
        """One indexed query; a row that cannot be read is skipped (and logged)."""

        def read(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
            # Only tasks that still wait: a request left pending by a task that ended
            # (canceled while it waited) is no question for anyone.
            return conn.execute(
                "SELECT a.request_id, a.task_id, a.request_json FROM agent_approvals AS a"
                " JOIN agent_tasks AS t ON t.id = a.task_id AND t.status = 'waiting_approval'"
                " WHERE a.status = 'pending' ORDER BY a.created_at, a.rowid LIMIT ?",
                (max(1, limit),),
            ).fetchall()

        pending = []
        for request_id, task_id, raw in await self._db.run(read):
            try:
                pending.append(ApprovalRequest.model_validate_json(raw))
            except ValidationError as exc:
                log.warning(
                    "approval request %s of task %s is unreadable: %s", request_id, task_id, exc
                )
        return pending

    async def approval(self, request_id: str) -> ApprovalRecord | None:
        """The row of ``request_id``."""

        def read(conn: sqlite3.Connection) -> tuple[str, str, str | None] | None:
            row = conn.execute(
                "SELECT task_id, request_json, decision_json FROM agent_approvals"
                " WHERE request_id = ?",
                (request_id,),
            ).fetchone()
            return tuple(row) if row is not None else None

        row = await self._db.run(read)
        if row is None:
            return None
        task_id, request_json, decision_json = row
        try:
            return ApprovalRecord(
                ApprovalRequest.model_validate_json(request_json),
                ApprovalDecision.model_validate_json(decision_json) if decision_json else None,
            )
        except ValidationError as exc:
            raise CorruptStateError(
                task_id, f"approval request {request_id} cannot be read: {exc}"
            ) from exc

    async def decide_approval(
        self,
        resolved: TaskEvent,
        *,
        then: TaskStatus,
        owner: str | None = None,
        lease_until: datetime | None = None,
        error: str | None = None,
        ending: TaskEvent | None = None,
        follow: Callable[[], Awaitable[None]] | None = None,
    ) -> ApprovalDecided | None:
        """See ``ITaskStore.decide_approval``: one ``BEGIN IMMEDIATE`` transaction.

        What ``follow`` writes is held apart while it runs, then applied in that transaction
        when the decision moves the task, each write in a savepoint of its own (as
        ``transition``'s ``then``).
        """
        if not isinstance(resolved, ApprovalResolved):
            raise TypeError("decide_approval records approval.resolved events")
        now = datetime.now(UTC)
        failure: BaseException | None = None
        followed = _Followed()
        if follow is not None:
            with self._db.held_apart() as held:
                try:
                    await follow()
                except BaseException as exc:  # the decision stands without what is left
                    failure = exc
            followed = _Followed(held.writes, held.after_commit, held.owners)

        def write(conn: sqlite3.Connection) -> ApprovalDecided | None:
            with transaction(conn):
                row = conn.execute(
                    "SELECT status, owner, lease_expires_at FROM agent_tasks WHERE id = ?",
                    (resolved.task_id,),
                ).fetchone()
                if row is None:
                    raise TaskNotFoundError(resolved.task_id)
                status, holder, lease = row
                if status != TaskStatus.WAITING_APPROVAL.value:
                    raise InvalidTransitionError(resolved.task_id, status, then.value)
                if holder not in (None, owner) and lease is not None and lease > _iso(now):
                    raise TaskHeldError(resolved.task_id, holder, "it asks its own approver")
                (last,) = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM agent_task_events WHERE task_id = ?",
                    (resolved.task_id,),
                ).fetchone()
                # The hint is past any number the caller's process has handed out already
                # (an event of a parallel call not yet written), the log's end past the rest.
                stored = resolved.model_copy(update={"seq": max(last + 1, resolved.seq)})
                if not _mark_decided(conn, stored):
                    return None
                conn.execute(
                    "INSERT INTO agent_task_events"
                    " (id, task_id, seq, event_type, payload_json, occurred_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        stored.event_id,
                        stored.task_id,
                        stored.seq,
                        stored.kind,
                        stored.model_dump_json(),
                        _iso(stored.occurred_at),
                    ),
                )
                (still_open,) = conn.execute(
                    "SELECT COUNT(*) FROM agent_approvals WHERE task_id = ? AND status = 'pending'",
                    (resolved.task_id,),
                ).fetchone()
                if still_open:
                    return ApprovalDecided(stored, still_open)
                running = then is TaskStatus.RUNNING
                conn.execute(
                    "UPDATE agent_tasks SET status = ?, updated_at = ?,"
                    " error_text = COALESCE(?, error_text), owner = ?, lease_expires_at = ?"
                    " WHERE id = ?",
                    (
                        then.value,
                        _iso(now),
                        error,
                        owner if running else None,
                        _iso(lease_until) if running and lease_until else None,
                        resolved.task_id,
                    ),
                )
                ended = None
                if ending is not None:
                    ended = ending.model_copy(update={"seq": stored.seq + 1})
                    _insert_event(conn, ended)
                followed.apply(conn, f"task {stored.task_id}: a write after its decision")
                return ApprovalDecided(stored, 0, ended)

        # Shielded, as a move: what was decided is followed through whatever happens to the
        # caller meanwhile.
        with anyio.CancelScope(shield=True):
            decided = await self._db.run(write)
            if decided is not None and decided.still_open == 0:
                await followed.published()
        if failure is not None:
            raise failure
        return decided

    async def task_metrics(self, scope: MetricsScope) -> TaskMetrics:
        """See ``ITaskStore.task_metrics``: three aggregate queries in one read transaction.

        Tasks are counted through ``agent_tasks_by_status`` (or the creation and session
        indexes with a scope), approval requests through ``agent_approvals_by_task``.
        """
        tasks_in_scope, params = task_condition(scope)
        of_tasks, task_params = task_condition(scope, alias="t")
        ended = ", ".join(f"'{status}'" for status in _ENDED)
        by_kernel = (
            f"COALESCE(json_extract(a.decision_json, '$.decided_by') = '{KERNEL_DECIDER}', 0)"
        )
        joined = (
            f"FROM agent_approvals AS a JOIN agent_tasks AS t ON t.id = a.task_id WHERE {of_tasks}"
        )

        def read(conn: sqlite3.Connection) -> TaskMetrics:
            statuses = conn.execute(
                f"SELECT status, COUNT(*) FROM agent_tasks WHERE {tasks_in_scope} GROUP BY status",
                params,
            ).fetchall()
            requested, approved, denied, expired, pending = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(a.status = 'approved'), 0),"
                f" COALESCE(SUM(a.status = 'denied' AND NOT {by_kernel}), 0),"
                f" COALESCE(SUM((a.status = 'denied' AND {by_kernel})"
                f" OR (a.status = 'pending' AND t.status IN ({ended}))), 0),"
                f" COALESCE(SUM(a.status = 'pending' AND t.status NOT IN ({ended})), 0) {joined}",
                task_params,
            ).fetchone()
            waits = conn.execute(
                grouped_percentiles(
                    f"SELECT 1 AS g, {milliseconds_between('a.created_at', 'a.decided_at')} AS v"
                    f" {joined} AND a.decided_at IS NOT NULL"
                ),
                task_params,
            ).fetchall()
            by_status = dict.fromkeys(TaskStatus, 0)
            unknown: dict[str, int] = {}
            for status, count in statuses:
                if status in _STATUSES:
                    by_status[TaskStatus(status)] = count
                else:
                    # One row a newer build (or damage) wrote must not stop the others from
                    # being counted; it is named, as listings name the rows they leave out.
                    unknown[str(status)] = count
                    log.error(
                        "%d task(s) have the status %r, which this core-agent does not know "
                        "(left out of the counts)",
                        count,
                        status,
                    )
            return TaskMetrics(
                tasks=TaskCounts(by_status=by_status, unknown_status=unknown),
                approvals=ApprovalMetrics(
                    requested=requested,
                    approved=approved,
                    denied=denied,
                    expired=expired,
                    pending=pending,
                    wait=percentiles(*waits[0][1:]) if waits else percentiles(0, None, None),
                ),
            )

        return await read_snapshot(self._db, self._readers, read)

    async def close(self) -> None:
        """Close the database connection (and the one stats were read on)."""
        await self._db.close()
        self._readers.close()
