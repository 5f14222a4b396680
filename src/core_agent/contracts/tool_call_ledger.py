"""Port for the tool-call ledger: what a task's tools were asked to do, and what came of it."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.agent_protocol import ToolResult

LedgerStatus = Literal["started", "finished", "timed_out"]
"""``started``: the intent is recorded and the tool may have acted (the process may have died
while it ran); ``finished``: the result is recorded; ``timed_out``: the kernel stopped waiting
(``note`` says whether the call went on and when it ended)."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One tool call as the ledger knows it.

    ``idempotency_key`` is stable across resumes of the task (the same call of the same
    conversation gets the same key), and tools receive it so they can pass it to services
    that deduplicate requests.
    """

    idempotency_key: str
    task_id: str
    call_id: str
    tool: str
    arguments: str
    """The call's arguments as canonical JSON (redacted where secrets were)."""
    idempotent: bool
    """Running it twice has the effect of running it once (reads, overwrites)."""
    status: LedgerStatus
    started_at: datetime
    result: ToolResult | None = None
    ended_at: datetime | None = None
    note: str | None = None


class IToolCallLedger(abc.ABC):
    """Records each tool call before it runs and its result after.

    A resumed task consults it: a recorded result is reused, never recomputed; a call with an
    intent but no result may or may not have acted, so it runs again only when it is
    idempotent, and otherwise goes to a human. ``begin`` commits before it returns (with the
    writes an open unit of work holds, when the ledger shares the task store's database): the
    intent must be durable before the tool acts. ``finish`` may be held back by an open unit
    of work, to commit with the step's events and checkpoint. Methods are awaitable; failures
    raise ``StorageError``.
    """

    @abc.abstractmethod
    async def begin(self, entry: LedgerEntry) -> LedgerEntry:
        """Record the intent to run ``entry`` (status ``started``), unless its key exists.

        A key stored without a result (``started`` or ``timed_out``: an attempt cut short, run
        again once a human said so) takes ``entry``'s ``started_at``: the new attempt's, so
        that a human's decision to run an interrupted call again covers that attempt only,
        never a later one cut short too.

        Returns:
            ``entry`` when it was recorded now; the stored entry when the key was already
            there (a resumed run: the caller decides from its status), with the new start.
        """

    @abc.abstractmethod
    async def finish(
        self,
        idempotency_key: str,
        result: ToolResult,
        *,
        status: LedgerStatus = "finished",
        note: str | None = None,
    ) -> None:
        """Record how the call ended (its result, or that the kernel stopped waiting).

        A call that ``timed_out`` and later finishes is recorded again with its result and a
        note saying so.
        """

    @abc.abstractmethod
    async def entries(self, task_id: str) -> list[LedgerEntry]:
        """The task's calls, in the order they started.

        Raises:
            CorruptStateError: A stored entry cannot be read.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the ledger is unusable afterwards."""
