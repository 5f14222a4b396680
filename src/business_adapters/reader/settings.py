"""The reader's own settings, read from ``READER_*`` variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core_agent.contracts.settings import AgentSettings

LIBRARY_FILE = Path("reader") / "library.db"


class ReaderSettings(BaseSettings):
    """Where the library is and how much of the open article a task is shown."""

    model_config = SettingsConfigDict(env_prefix="READER_", env_file=None, frozen=True)

    library_path: Path | None = None
    """``READER_LIBRARY_PATH``: the library's SQLite file; ``reader/library.db`` in the
    kernel's data directory (``AGENT_DATA_DIR``) when unset, where the file tools cannot
    reach it (the data directory is closed to them): only the reader's tools can."""
    context_chars: int = Field(default=4000, ge=200, le=100_000)
    """``READER_CONTEXT_CHARS``: how much of the article the user is reading goes with a task
    (its beginning); the model reads the rest with ``get_article``."""

    def library_file(self, agent: AgentSettings) -> Path:
        """The library's file, given the kernel's settings."""
        return self.library_path or agent.data_dir / LIBRARY_FILE
