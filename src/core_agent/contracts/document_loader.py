"""Port for reading a file into plain text for ingestion."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """A file's text as a reader would see it, with what is known about it."""

    text: str
    media_type: str
    title: str | None = None


class IDocumentLoader(abc.ABC):
    """Turns files of some types into text. Loading blocks on I/O; callers use a thread."""

    @property
    @abc.abstractmethod
    def suffixes(self) -> frozenset[str]:
        """Lower-case file suffixes this loader reads, with the dot (``{".md", ".txt"}``)."""

    @abc.abstractmethod
    def load(self, path: Path) -> LoadedDocument:
        """Read ``path`` into text.

        Raises:
            UsageError: The file cannot be decoded or parsed as its type says.
        """
