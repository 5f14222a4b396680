"""Port for sessions: who they belong to, their ordered history and its summaries."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared.agent_protocol import ChatMessage, SessionEntry, SessionInfo, SessionSummary


@dataclass(frozen=True, slots=True)
class SessionHistory:
    """What a new task of a session starts from: the latest summary and the entries after it.

    ``summary`` is the latest one not superseded by a retry; ``entries`` are every entry not
    superseded whose ``seq`` is above ``summary.through_seq`` (all of them when there is no
    summary yet), in order.
    """

    summary: SessionSummary | None = None
    entries: list[SessionEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DeletedSession:
    """What ``delete_session`` removed."""

    session_id: str
    tasks: int
    entries: int
    summaries: int


class ISessionStore(abc.ABC):
    """Persists sessions and their history so a conversation survives restarts.

    Implementations may block on disk I/O but must do so off the event loop (all methods are
    awaitable). Storage failures raise ``StorageError``. Tasks themselves live in the task
    store; a session store that shares its database also removes a deleted session's tasks
    and everything recorded about them.
    """

    @abc.abstractmethod
    async def create_session(self, session: SessionInfo) -> None:
        """Store a new session.

        Raises:
            UsageError: A session with that id exists already.
        """

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> SessionInfo:
        """The stored session, with its ``task_count``.

        Raises:
            SessionNotFoundError: No such session.
        """

    @abc.abstractmethod
    async def list_sessions(
        self, *, user_id: str | None = None, limit: int = 50
    ) -> list[SessionInfo]:
        """Sessions, most recently active first, optionally only ``user_id``'s."""

    @abc.abstractmethod
    async def close_session(self, session_id: str, *, at: datetime) -> SessionInfo:
        """Mark the session closed at ``at`` (no-op if it is already); returns it.

        Raises:
            SessionNotFoundError: No such session.
        """

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> DeletedSession:
        """Remove the session, its history, its summaries and its tasks with their records.

        Raises:
            SessionNotFoundError: No such session.
            SessionBusyError: One of its tasks has not ended (nothing is removed).
        """

    @abc.abstractmethod
    async def fork_session(
        self, session_id: str, *, at_turn: int, new_session: SessionInfo
    ) -> SessionInfo:
        """Store ``new_session`` holding a copy of ``session_id``'s history up to ``at_turn``.

        One transaction: the new session gets the origin's live (not superseded) entries of
        turns 1 to ``at_turn``, renumbered from 1 (``seq`` and ``turn``; ``task_id`` and
        ``created_at`` kept), the live summaries that cover only those, ``forked_from``,
        and ``inherited_usage``: the origin's own plus that of its tasks created by the
        time ``at_turn`` was added (superseded turns' too) or that added no turn. The origin
        is not changed.
        Returns the new session as stored.

        Raises:
            SessionNotFoundError: No session ``session_id``.
            SessionBusyError: One of its tasks has not ended (nothing is written).
            UsageError: It has no turn ``at_turn``, that turn was superseded, or a session
                with the new id exists already (nothing is written).
        """

    @abc.abstractmethod
    async def append_turn(
        self,
        session_id: str,
        task_id: str,
        messages: Sequence[ChatMessage],
        *,
        tainted: bool,
        at: datetime,
    ) -> list[SessionEntry]:
        """Append a finished task's turn to the session's history, after every entry so far.

        The entries get the session's next turn number. Idempotent per task: when
        ``task_id`` already has entries, nothing is added and the existing ones are returned.
        A store whose writes join a unit of work (``ITaskStore.unit_of_work``, so a task's
        turn commits with its ending) returns an empty list for a write it held back.
        """

    @abc.abstractmethod
    async def history(self, session_id: str) -> SessionHistory:
        """The latest summary and the entries it does not cover (see ``SessionHistory``)."""

    @abc.abstractmethod
    async def entries(self, session_id: str) -> list[SessionEntry]:
        """Every entry of the session's history, in order (summaries do not remove any).

        Superseded entries are included, with ``superseded_by`` set.
        """

    @abc.abstractmethod
    async def summaries(self, session_id: str) -> list[SessionSummary]:
        """The session's summaries, oldest first (superseded ones too, marked)."""

    @abc.abstractmethod
    async def save_summary(self, summary: SessionSummary) -> None:
        """Store a summary; a later task's ``history`` starts from it.

        A summary covering the same ``through_seq`` as a stored one replaces it.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources."""
