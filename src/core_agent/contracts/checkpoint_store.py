"""Port for checkpoints: the typed state a run resumes from, and the conversation behind it."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from shared.agent_protocol import ChatMessage


class Checkpoint(BaseModel):
    """Base of every checkpoint: a kind and a version, both checked when it is loaded.

    A subclass fixes ``kind`` and ``version`` with ``Literal`` types, so a checkpoint written
    by another kind of run, or by an incompatible version, fails to load with a clear error
    instead of resuming from something else.
    """

    model_config = ConfigDict(extra="forbid")

    kind: str
    version: int


C = TypeVar("C", bound=Checkpoint)


class ICheckpointStore(abc.ABC):
    """Stores checkpoints per task and key (a run, or a step of a plan), and their messages.

    Saving under an existing key replaces it. A key's conversation is kept as an append-only
    log of messages beside it, so a checkpoint costs the same at turn 100 as at turn 1; the
    checkpoint records how many of the messages it covers. Writes join the task store's open
    unit of work when they share its database (see ``ITaskStore.unit_of_work``). Methods are
    awaitable; failures raise ``StorageError``.
    """

    @abc.abstractmethod
    async def save(self, task_id: str, key: str, checkpoint: Checkpoint) -> None:
        """Persist ``checkpoint`` for ``(task_id, key)``, replacing the previous one.

        Raises:
            StorageError: The write failed (the previous checkpoint stands).
        """

    @abc.abstractmethod
    async def load(self, task_id: str, key: str, model: type[C]) -> C | None:
        """The checkpoint saved under ``(task_id, key)`` as a ``model``, or ``None``.

        Raises:
            CorruptStateError: What is stored is not a valid ``model`` (another kind, another
                version, or damaged): that task cannot resume from it.
        """

    @abc.abstractmethod
    async def append_messages(
        self, task_id: str, key: str, first: int, messages: Sequence[ChatMessage]
    ) -> None:
        """Store ``messages`` at positions ``first``, ``first + 1``... of the key's log.

        Positions already written are replaced (a run that resumed writes them again).

        Raises:
            StorageError: The write failed.
        """

    @abc.abstractmethod
    async def load_messages(self, task_id: str, key: str, count: int) -> list[ChatMessage]:
        """The first ``count`` messages of the key's log, in order.

        Raises:
            CorruptStateError: A message is missing or unreadable.
        """

    @abc.abstractmethod
    async def list_keys(self, task_id: str) -> list[str]:
        """Keys saved for the task, in the order they were first saved."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
