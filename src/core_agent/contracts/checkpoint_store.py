"""Port for checkpoints: the serialized state a task resumes from."""

from __future__ import annotations

import abc
from typing import Any


class ICheckpointStore(abc.ABC):
    """Stores JSON-serializable checkpoints per task, keyed by a step name.

    Saving under an existing key replaces it atomically. Methods are awaitable; failures
    raise ``StorageError``.
    """

    @abc.abstractmethod
    async def save(self, task_id: str, key: str, state: dict[str, Any]) -> None:
        """Persist ``state`` for ``(task_id, key)``.

        Raises:
            UsageError: ``state`` is not JSON-serializable (nothing is written).
            StorageError: The write failed (the previous checkpoint stands).
        """

    @abc.abstractmethod
    async def load(self, task_id: str, key: str) -> dict[str, Any] | None:
        """Return the state saved under ``(task_id, key)``, or ``None``."""

    @abc.abstractmethod
    async def list_keys(self, task_id: str) -> list[str]:
        """Keys saved for the task, in the order they were first saved."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
