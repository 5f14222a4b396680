"""``IDocumentLoader`` for PDF with pypdf (pure Python, maintained); needs the ``pdf`` extra.

Text comes from the PDF's text layer, page by page; scanned pages without one yield nothing
(no OCR), and a document with no text at all is refused with that explanation.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core_agent.contracts.document_loader import IDocumentLoader, LoadedDocument
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings

_PAGE_BREAK = "\n\n"


class PypdfDocumentLoader(IDocumentLoader):
    """Text of every page, pages separated by a blank line; the metadata title is the title."""

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> PypdfDocumentLoader:
        """No options."""
        return cls()

    @property
    def suffixes(self) -> frozenset[str]:
        """``.pdf``."""
        return frozenset({".pdf"})

    def load(self, path: Path) -> LoadedDocument:
        """Extract the text layer.

        Raises:
            UsageError: pypdf is missing, the file is encrypted or not a readable PDF, or it
                has no text layer.
        """
        try:
            from pypdf import PdfReader
            from pypdf.errors import PyPdfError
        except ImportError as exc:
            raise UsageError("reading PDF needs: pip install 'core-agent[pdf]'") from exc
        # pypdf logs every recoverable oddity of a file as a warning; they are not ours.
        logging.getLogger("pypdf").setLevel(logging.ERROR)
        try:
            reader = PdfReader(path)
            if reader.is_encrypted:
                raise UsageError(f"{path} is encrypted; decrypt it before ingesting")
            pages = [page.extract_text() or "" for page in reader.pages]
            title = reader.metadata.title if reader.metadata else None
        except PyPdfError as exc:
            raise UsageError(f"{path} is not a readable PDF: {exc}") from exc
        text = _PAGE_BREAK.join(page.strip() for page in pages).strip()
        if not text:
            raise UsageError(f"{path} has no text layer (scanned pages need OCR first)")
        return LoadedDocument(text=text, media_type="application/pdf", title=title or None)
