"""``ISessionStore`` on SQLite: sessions, their history and summaries, in the kernel's database.

The history is ``agent_session_entries`` (one row per message, numbered per session, with the
number of the turn it belongs to) and the summaries ``agent_session_summaries`` (keyed by the
last entry they cover). A retry marks the entries and summaries it supersedes
(``supersede_turns``, in the transaction that creates the retrying task); a fork copies a
history's live turns into a new session in one transaction. Deleting a session
also deletes its tasks and what the other stores recorded about them (events, spans,
checkpoints, conversation logs, the tool-call ledger, approvals): they share this database,
so it is one transaction.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from core_agent.contracts.errors import (
    CorruptSessionError,
    SessionBusyError,
    SessionClosedError,
    SessionNotFoundError,
    UsageError,
)
from core_agent.contracts.session_store import DeletedSession, ISessionStore, SessionHistory
from providers.sqlite.database import SqliteDatabase, transaction
from shared.agent_protocol import (
    ChatMessage,
    SessionEntry,
    SessionInfo,
    SessionOrigin,
    SessionSummary,
    TokenUsage,
)

log = logging.getLogger(__name__)
R = TypeVar("R")

_MESSAGE: TypeAdapter[ChatMessage] = TypeAdapter(ChatMessage)
_OPEN_STATUSES = ("queued", "running", "waiting_approval")
_TASK_TABLES = (
    "agent_task_events",
    "agent_traces",
    "agent_checkpoints",
    "agent_task_messages",
    "agent_tool_calls",
    "agent_approvals",
)
"""Tables keyed by ``task_id`` whose rows go with a deleted session's tasks."""
_SESSION_COLUMNS = (
    "s.id, s.user_id, s.metadata_json, s.created_at, s.updated_at, s.closed_at,"
    " (SELECT COUNT(*) FROM agent_tasks AS t WHERE t.session_id = s.id),"
    " s.forked_from, s.forked_at_turn, s.inherited_usage_json"
)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _open_task(conn: sqlite3.Connection, session_id: str) -> tuple[str, str] | None:
    row = conn.execute(
        "SELECT id, status FROM agent_tasks WHERE session_id = ? AND status IN (?, ?, ?) LIMIT 1",
        (session_id, *_OPEN_STATUSES),
    ).fetchone()
    return (row[0], row[1]) if row is not None else None


def check_session_takes_a_task(conn: sqlite3.Connection, session_id: str) -> None:
    """Refuse a new task in a closed session or one whose last task has not ended.

    Call inside the transaction that inserts the task (``SqliteTaskStore.create_task``).

    Raises:
        SessionClosedError: The session was closed.
        SessionBusyError: A task of the session is queued, running or waiting for a human.
    """
    row = conn.execute(
        "SELECT closed_at FROM agent_sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if row is not None and row[0] is not None:
        raise SessionClosedError(session_id)
    held = _open_task(conn, session_id)
    if held is not None:
        raise SessionBusyError(session_id, held[0], held[1], "submit the next task")


def _check_idle(conn: sqlite3.Connection, session_id: str, action: str) -> None:
    """Refuse ``action`` on a session that does not exist or has a task not ended."""
    if conn.execute("SELECT 1 FROM agent_sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFoundError(session_id)
    held = _open_task(conn, session_id)
    if held is not None:
        raise SessionBusyError(session_id, held[0], held[1], action)


_ABANDONED = "superseded_by NOT IN (SELECT task_id FROM agent_session_entries WHERE session_id = ?)"
"""An entry's retry added no turn: once the session has no open task, it never will."""


def _live_turn(
    conn: sqlite3.Connection, session_id: str, turn: int, *, abandoned: bool = False
) -> int:
    """The first ``seq`` of the session's ``turn``, which must be live (not superseded).

    With ``abandoned`` a turn superseded by a retry that added no turn is taken too (the
    caller checked that the session has no open task).

    Raises:
        UsageError: The session has no such turn, or it was superseded.
    """
    row = conn.execute(
        "SELECT MIN(seq), MAX(superseded_by) FROM agent_session_entries"
        " WHERE session_id = ? AND turn = ?",
        (session_id, turn),
    ).fetchone()
    if row[0] is None:
        (last,) = conn.execute(
            "SELECT MAX(turn) FROM agent_session_entries WHERE session_id = ?", (session_id,)
        ).fetchone()
        held = f"turns 1 to {last}" if last else "no turns yet"
        raise UsageError(f"session {session_id!r} has {held}, not turn {turn}")
    if row[1] is not None and not (
        abandoned
        and conn.execute(
            f"SELECT 1 FROM agent_session_entries WHERE session_id = ? AND turn = ?"
            f" AND {_ABANDONED} LIMIT 1",
            (session_id, turn, session_id),
        ).fetchone()
    ):
        raise UsageError(
            f"turn {turn} of session {session_id!r} was superseded by task {row[1]}'s retry"
        )
    first: int = row[0]
    return first


def supersede_turns(conn: sqlite3.Connection, session_id: str, turn: int, task_id: str) -> None:
    """Mark ``turn`` and every live turn after it, and the summaries of them, superseded.

    Call inside the transaction that inserts ``task_id``, the task that retries the turn
    (``SqliteTaskStore.create_task``), after checking the session has no open task: the
    turns are superseded if and only if it exists. What an abandoned retry (one that
    added no turn) superseded from ``turn`` on is taken over by this one.

    Raises:
        UsageError: The session has no such turn, or it was superseded already (by a
            retry that added its turn).
    """
    first = _live_turn(conn, session_id, turn, abandoned=True)
    taken = f"(superseded_by IS NULL OR {_ABANDONED})"
    conn.execute(
        "UPDATE agent_session_entries SET superseded_by = ?"
        f" WHERE session_id = ? AND seq >= ? AND {taken}",
        (task_id, session_id, first, session_id),
    )
    # A live summary covers every live entry up to its ``through_seq``: one reaching the
    # retried turn holds what is discarded now.
    conn.execute(
        "UPDATE agent_session_summaries SET superseded_by = ?"
        f" WHERE session_id = ? AND through_seq >= ? AND {taken}",
        (task_id, session_id, first, session_id),
    )


def _usage_at_turn(conn: sqlite3.Connection, session_id: str, turn: int) -> TokenUsage:
    """What the session had used when ``turn`` was added: a fork at it carries this.

    Its own inherited usage and that of every task created by then (superseded turns'
    tasks too: they were spent on the way). Tasks run one at a time per session, so those
    are the tasks that ran before the turn was added, and the turn's own. Tasks that added
    no turn (canceled by their caller) count wherever they are: otherwise tokens spent and
    canceled after the latest turn would be left behind by a fork at it.
    """
    (carried,) = conn.execute(
        "SELECT inherited_usage_json FROM agent_sessions WHERE id = ?", (session_id,)
    ).fetchone()
    (added_at,) = conn.execute(
        "SELECT MAX(created_at) FROM agent_session_entries WHERE session_id = ? AND turn = ?",
        (session_id, turn),
    ).fetchone()
    usage = _readable(
        session_id, "its usage cannot be read", lambda: TokenUsage.model_validate_json(carried)
    )
    for (usage_json,) in conn.execute(
        "SELECT usage_json FROM agent_tasks WHERE session_id = ? AND (created_at <= ?"
        " OR id NOT IN (SELECT task_id FROM agent_session_entries WHERE session_id = ?))",
        (session_id, added_at, session_id),
    ):
        usage += _readable(
            session_id,
            "a task's usage cannot be read",
            lambda: TokenUsage.model_validate_json(usage_json),  # noqa: B023 (called at once)
        )
    return usage


def _readable(session_id: str, what: str, read: Callable[[], R]) -> R:
    """``read()``, or ``CorruptSessionError`` naming the session when a stored row is damaged."""
    try:
        return read()
    except (ValueError, TypeError, ValidationError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CorruptSessionError(session_id, f"{what}: {detail}") from exc


def _session(row: tuple[Any, ...]) -> SessionInfo:
    return _readable(str(row[0]), "its record cannot be read", lambda: _session_of(row))


def _session_of(row: tuple[Any, ...]) -> SessionInfo:
    (
        session_id,
        user_id,
        metadata_json,
        created_at,
        updated_at,
        closed_at,
        tasks,
        forked_from,
        forked_at_turn,
        inherited_usage_json,
    ) = row
    return SessionInfo(
        session_id=session_id,
        user_id=user_id,
        metadata=json.loads(metadata_json or "{}"),
        created_at=datetime.fromisoformat(created_at),
        updated_at=datetime.fromisoformat(updated_at),
        closed_at=datetime.fromisoformat(closed_at) if closed_at else None,
        task_count=tasks,
        forked_from=(
            SessionOrigin(session_id=forked_from, turn=forked_at_turn)
            if forked_from is not None
            else None
        ),
        inherited_usage=TokenUsage.model_validate_json(inherited_usage_json),
    )


def _entry(session_id: str, row: tuple[Any, ...]) -> SessionEntry:
    return _readable(
        session_id, f"entry {row[0]} cannot be read", lambda: _entry_of(session_id, row)
    )


def _entry_of(session_id: str, row: tuple[Any, ...]) -> SessionEntry:
    seq, turn, task_id, message_json, tainted, superseded_by, created_at = row
    return SessionEntry(
        session_id=session_id,
        seq=seq,
        turn=turn,
        task_id=task_id,
        message=_MESSAGE.validate_json(message_json),
        tainted=bool(tainted),
        superseded_by=superseded_by,
        created_at=datetime.fromisoformat(created_at),
    )


def _summary(session_id: str, row: tuple[Any, ...]) -> SessionSummary:
    return _readable(session_id, "its summary cannot be read", lambda: _summary_of(session_id, row))


def _summary_of(session_id: str, row: tuple[Any, ...]) -> SessionSummary:
    through_seq, content, task_id, tainted, usage_json, superseded_by, created_at = row
    return SessionSummary(
        session_id=session_id,
        through_seq=through_seq,
        content=content,
        task_id=task_id,
        tainted=bool(tainted),
        usage=TokenUsage.model_validate_json(usage_json),
        superseded_by=superseded_by,
        created_at=datetime.fromisoformat(created_at),
    )


_ENTRY_COLUMNS = "seq, turn, task_id, message_json, tainted, superseded_by, created_at"
_SUMMARY_COLUMNS = "through_seq, content, task_id, tainted, usage_json, superseded_by, created_at"


class SqliteSessionStore(ISessionStore):
    """Sessions in ``agent_sessions``, history and summaries in their own tables."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    async def create_session(self, session: SessionInfo) -> None:
        """See ``ISessionStore.create_session``."""

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO agent_sessions"
                    " (id, user_id, created_at, updated_at, metadata_json, closed_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        session.session_id,
                        session.user_id,
                        _iso(session.created_at),
                        _iso(session.updated_at),
                        json.dumps(session.metadata, ensure_ascii=False),
                        _iso(session.closed_at) if session.closed_at else None,
                    ),
                )
                if cursor.rowcount == 0:
                    raise UsageError(f"a session with id {session.session_id!r} exists already")

        await self._db.transact(write)

    async def get_session(self, session_id: str) -> SessionInfo:
        """See ``ISessionStore.get_session``."""

        def read(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM agent_sessions AS s WHERE s.id = ?",
                (session_id,),
            ).fetchone()
            return row

        row = await self._db.run(read)
        if row is None:
            raise SessionNotFoundError(session_id)
        return _session(row)

    async def list_sessions(
        self, *, user_id: str | None = None, limit: int = 50
    ) -> list[SessionInfo]:
        """See ``ISessionStore.list_sessions``."""
        where, params = ("WHERE s.user_id = ?", [user_id]) if user_id is not None else ("", [])

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM agent_sessions AS s {where}"
                " ORDER BY s.updated_at DESC, s.id LIMIT ?",
                (*params, limit),
            ).fetchall()

        sessions = []
        for row in await self._db.run(read):
            try:
                sessions.append(_session(row))
            except CorruptSessionError as exc:
                # One damaged session must not hide the others.
                log.error("%s (left out of the listing)", exc)
        return sessions

    async def close_session(self, session_id: str, *, at: datetime) -> SessionInfo:
        """See ``ISessionStore.close_session``."""

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "UPDATE agent_sessions SET closed_at = ?, updated_at = ?"
                    " WHERE id = ? AND closed_at IS NULL",
                    (_iso(at), _iso(at), session_id),
                )

        await self._db.transact(write)
        return await self.get_session(session_id)

    async def delete_session(self, session_id: str) -> DeletedSession:
        """See ``ISessionStore.delete_session``."""

        def write(conn: sqlite3.Connection) -> DeletedSession:
            with transaction(conn):
                _check_idle(conn, session_id, "delete the session")
                tasks = "SELECT id FROM agent_tasks WHERE session_id = ?"
                for table in _TASK_TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE task_id IN ({tasks})", (session_id,))
                removed_tasks = conn.execute(
                    "DELETE FROM agent_tasks WHERE session_id = ?", (session_id,)
                ).rowcount
                entries = conn.execute(
                    "DELETE FROM agent_session_entries WHERE session_id = ?", (session_id,)
                ).rowcount
                summaries = conn.execute(
                    "DELETE FROM agent_session_summaries WHERE session_id = ?", (session_id,)
                ).rowcount
                conn.execute("DELETE FROM agent_sessions WHERE id = ?", (session_id,))
                return DeletedSession(session_id, removed_tasks, entries, summaries)

        return await self._db.transact(write)

    async def fork_session(
        self, session_id: str, *, at_turn: int, new_session: SessionInfo
    ) -> SessionInfo:
        """See ``ISessionStore.fork_session``."""

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                _check_idle(conn, session_id, "fork the session")
                _live_turn(conn, session_id, at_turn)
                (through,) = conn.execute(
                    "SELECT MAX(seq) FROM agent_session_entries WHERE session_id = ? AND turn = ?",
                    (session_id, at_turn),
                ).fetchone()
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO agent_sessions (id, user_id, created_at, updated_at,"
                    " metadata_json, forked_from, forked_at_turn, inherited_usage_json)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        new_session.session_id,
                        new_session.user_id,
                        _iso(new_session.created_at),
                        _iso(new_session.updated_at),
                        json.dumps(new_session.metadata, ensure_ascii=False),
                        session_id,
                        at_turn,
                        _usage_at_turn(conn, session_id, at_turn).model_dump_json(),
                    ),
                )
                if cursor.rowcount == 0:
                    raise UsageError(f"a session with id {new_session.session_id!r} exists already")
                live = conn.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM agent_session_entries WHERE session_id = ?"
                    " AND seq <= ? AND superseded_by IS NULL ORDER BY seq",
                    (session_id, through),
                ).fetchall()
                # Renumbered from 1: the fork's history has no gaps where superseded turns were.
                seqs: dict[int, int] = {}
                turns: dict[int, int] = {}
                copied = []
                for seq, turn, task_id, message_json, tainted, _, created_at in live:
                    seqs[seq] = len(seqs) + 1
                    turns.setdefault(turn, len(turns) + 1)
                    copied.append(
                        (
                            new_session.session_id,
                            seqs[seq],
                            turns[turn],
                            task_id,
                            message_json,
                            tainted,
                            None,
                            created_at,
                        )
                    )
                conn.executemany(
                    f"INSERT INTO agent_session_entries (session_id, {_ENTRY_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    copied,
                )
                # Live summaries cover live entries only, so each ends on a copied one.
                summaries = conn.execute(
                    f"SELECT {_SUMMARY_COLUMNS} FROM agent_session_summaries"
                    " WHERE session_id = ? AND through_seq <= ? AND superseded_by IS NULL",
                    (session_id, through),
                ).fetchall()
                conn.executemany(
                    f"INSERT INTO agent_session_summaries (session_id, {_SUMMARY_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (new_session.session_id, seqs[row[0]], *row[1:])
                        for row in summaries
                        if row[0] in seqs
                    ],
                )

        await self._db.transact(write)
        return await self.get_session(new_session.session_id)

    async def append_turn(
        self,
        session_id: str,
        task_id: str,
        messages: Sequence[ChatMessage],
        *,
        tainted: bool,
        at: datetime,
    ) -> list[SessionEntry]:
        """See ``ISessionStore.append_turn``.

        Inside a unit of work on this database (a task's ending move) the write joins it,
        and the entries, not numbered yet, are not returned (an empty list).
        """
        created = _iso(at)
        stored: list[tuple[Any, ...]] = []

        def add(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            with transaction(conn):
                existing = conn.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM agent_session_entries"
                    " WHERE session_id = ? AND task_id = ? ORDER BY seq",
                    (session_id, task_id),
                ).fetchall()
                if existing:
                    return existing
                last, turns = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0), COALESCE(MAX(turn), 0)"
                    " FROM agent_session_entries WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
                rows = [
                    (
                        last + offset,
                        turns + 1,
                        task_id,
                        message.model_dump_json(),
                        int(tainted),
                        None,
                        created,
                    )
                    for offset, message in enumerate(messages, start=1)
                ]
                conn.executemany(
                    f"INSERT INTO agent_session_entries (session_id, {_ENTRY_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(session_id, *row) for row in rows],
                )
                conn.execute(
                    "UPDATE agent_sessions SET updated_at = ? WHERE id = ?", (created, session_id)
                )
                return rows

        def write(conn: sqlite3.Connection) -> None:
            stored[:] = add(conn)

        await self._db.write(write)
        return [_entry(session_id, row) for row in stored]

    async def history(self, session_id: str) -> SessionHistory:
        """See ``ISessionStore.history``."""

        def read(
            conn: sqlite3.Connection,
        ) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]]]:
            summary = conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM agent_session_summaries"
                " WHERE session_id = ? AND superseded_by IS NULL"
                " ORDER BY through_seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            after = summary[0] if summary is not None else 0
            entries = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM agent_session_entries"
                " WHERE session_id = ? AND seq > ? AND superseded_by IS NULL ORDER BY seq",
                (session_id, after),
            ).fetchall()
            return summary, entries

        summary, entries = await self._db.run(read)
        return SessionHistory(
            summary=_summary(session_id, summary) if summary is not None else None,
            entries=[_entry(session_id, row) for row in entries],
        )

    async def entries(self, session_id: str) -> list[SessionEntry]:
        """See ``ISessionStore.entries``."""

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM agent_session_entries WHERE session_id = ?"
                " ORDER BY seq",
                (session_id,),
            ).fetchall()

        return [_entry(session_id, row) for row in await self._db.run(read)]

    async def summaries(self, session_id: str) -> list[SessionSummary]:
        """See ``ISessionStore.summaries``."""

        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM agent_session_summaries WHERE session_id = ?"
                " ORDER BY through_seq",
                (session_id,),
            ).fetchall()

        return [_summary(session_id, row) for row in await self._db.run(read)]

    async def save_summary(self, summary: SessionSummary) -> None:
        """See ``ISessionStore.save_summary``."""

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "INSERT OR REPLACE INTO agent_session_summaries"
                    " (session_id, through_seq, content, task_id, tainted, usage_json,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        summary.session_id,
                        summary.through_seq,
                        summary.content,
                        summary.task_id,
                        int(summary.tainted),
                        summary.usage.model_dump_json(),
                        _iso(summary.created_at),
                    ),
                )

        await self._db.transact(write)

    async def close(self) -> None:
        """Release this store's handle on the database."""
        await self._db.close()
