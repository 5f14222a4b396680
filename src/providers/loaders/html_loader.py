"""``IDocumentLoader`` for HTML: the text a reader sees, with the standard library's parser.

Scripts, styles and other non-content elements are dropped; block elements end lines so
paragraphs stay apart for chunking. The parser is lenient, like a browser: broken markup
still yields its text.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from core_agent.contracts.document_loader import IDocumentLoader, LoadedDocument
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings

_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe"})
_BLOCKS = frozenset(
    """address article aside blockquote br dd div dl dt figcaption figure footer form h1 h2
    h3 h4 h5 h6 header hr li main nav ol p pre section table td th tr ul""".split()
)
_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_-]+)""", re.IGNORECASE)


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED:
            self._skip_depth += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip_depth:
            self.parts.append(data)


def _decode(path: Path, data: bytes) -> str:
    declared = _CHARSET.search(data[:4096])
    for encoding in ([declared.group(1).decode()] if declared else []) + ["utf-8-sig"]:
        try:
            return data.decode(encoding)
        except (LookupError, UnicodeDecodeError):
            continue
    raise UsageError(f"{path} is neither UTF-8 nor in the charset it declares")


class HtmlDocumentLoader(IDocumentLoader):
    """Visible text of an HTML page; its ``<title>`` is the title."""

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> HtmlDocumentLoader:
        """No options."""
        return cls()

    @property
    def suffixes(self) -> frozenset[str]:
        """``.html``, ``.htm``, ``.xhtml``."""
        return frozenset({".html", ".htm", ".xhtml"})

    def load(self, path: Path) -> LoadedDocument:
        """The page's visible text, whitespace collapsed within lines.

        Raises:
            UsageError: The bytes cannot be decoded.
        """
        extractor = _TextExtractor()
        extractor.feed(_decode(path, path.read_bytes()))
        extractor.close()
        lines = (" ".join(line.split()) for line in "".join(extractor.parts).splitlines())
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        title = " ".join("".join(extractor.title).split()) or None
        return LoadedDocument(text=text, media_type="text/html", title=title)
