"""``IDocumentLoader`` for plain text and Markdown files (UTF-8)."""

from __future__ import annotations

import re
from pathlib import Path

from core_agent.contracts.document_loader import IDocumentLoader, LoadedDocument
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings

_MARKDOWN = frozenset({".md", ".markdown"})
_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.MULTILINE)


class PlainTextDocumentLoader(IDocumentLoader):
    """Reads UTF-8 text as is; a Markdown file's first ``#`` heading is its title."""

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> PlainTextDocumentLoader:
        """No options."""
        return cls()

    @property
    def suffixes(self) -> frozenset[str]:
        """``.txt``, ``.text``, ``.md``, ``.markdown``, ``.rst``."""
        return frozenset({".txt", ".text", ".rst"}) | _MARKDOWN

    def load(self, path: Path) -> LoadedDocument:
        """The file's text (a byte-order mark is dropped).

        Raises:
            UsageError: The file is not UTF-8 text.
        """
        data = path.read_bytes()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{path} is not UTF-8 text (byte {exc.start} cannot be decoded)"
            ) from exc
        if "\x00" in text:
            raise UsageError(f"{path} looks binary (it contains NUL bytes)")
        markdown = path.suffix.lower() in _MARKDOWN
        heading = _HEADING.search(text) if markdown else None
        return LoadedDocument(
            text=text,
            media_type="text/markdown" if markdown else "text/plain",
            title=heading.group(1) if heading else None,
        )
