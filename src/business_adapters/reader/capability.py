"""The reading app as a business capability: its tools, context, rule, instructions, articles.

The context of a task is the article the user is reading now. The app says which in one of
two ways: per task, with ``TaskRequest(metadata={"reader.article_id": 12})`` (what a host on
the stdio protocol does), or once for all tasks, with ``ReaderLibrary.set_reading_now(12)``
(the library file is shared, so the app may do it from its own process). The request's
metadata wins. The context holds the article's title, source, the user's highlights in it
and the beginning of its text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources

import anyio.to_thread
from pydantic import ValidationError

from business_adapters.reader.library import Article, ReaderLibrary
from business_adapters.reader.settings import ReaderSettings
from business_adapters.reader.tools import (
    GetArticleTool,
    ListHighlightsTool,
    SaveHighlightTool,
    SearchArticlesTool,
)
from core_agent.contracts.business_capability_provider import (
    CapabilityDocument,
    IBusinessCapabilityProvider,
)
from core_agent.contracts.errors import ConfigurationError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool
from shared.agent_protocol import TaskRequest

ARTICLE_METADATA_KEY = "reader.article_id"
DOCUMENT_BATCH = 100


def article_document_id(article_id: int) -> str:
    """The id of an article among the reader's documents."""
    return f"article/{article_id}"


def _resource(name: str) -> str:
    return resources.files("business_adapters.reader").joinpath(name).read_text("utf-8")


class ReaderCapability(IBusinessCapabilityProvider):
    """The reader over ``library``; the library file is opened on first use."""

    def __init__(self, library: ReaderLibrary, *, context_chars: int = 4000) -> None:
        self.library = library
        self._context_chars = context_chars
        self._tools: list[ITool] = [
            SearchArticlesTool(library),
            GetArticleTool(library),
            ListHighlightsTool(library),
            SaveHighlightTool(library),
        ]

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> ReaderCapability:
        """The library of ``READER_LIBRARY_PATH`` (default: in ``AGENT_DATA_DIR``).

        Raises:
            ConfigurationError: A ``READER_*`` variable has a bad value.
        """
        try:
            reader = ReaderSettings()
        except ValidationError as exc:
            raise ConfigurationError(f"invalid reader settings (READER_*): {exc}") from exc
        return cls(ReaderLibrary(reader.library_file(settings)), context_chars=reader.context_chars)

    @property
    def name(self) -> str:
        """``reader``."""
        return "reader"

    def tools(self) -> list[ITool]:
        """``search_articles``, ``get_article``, ``list_highlights``, ``save_highlight``."""
        return list(self._tools)

    def system_instructions(self) -> str:
        """How to use the library (``instructions.md``)."""
        return _resource("instructions.md")

    def policy_rules(self) -> str:
        """Saving a highlight is high risk, so the user approves it (``policy.toml``)."""
        return _resource("policy.toml")

    async def context(self, request: TaskRequest) -> str | None:
        """The article the user is reading now, if the app said (see the module).

        Raises:
            UsageError: The request's ``reader.article_id`` is not an article id, or names
                no article.
        """
        given = request.metadata.get(ARTICLE_METADATA_KEY)
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, int | str):
                raise UsageError(f"{ARTICLE_METADATA_KEY} must be an article id, not {given!r}")
            try:
                article_id = int(given)
            except ValueError as exc:
                raise UsageError(
                    f"{ARTICLE_METADATA_KEY} must be an article id, not {given!r}"
                ) from exc
            article: Article | None = await anyio.to_thread.run_sync(
                self.library.get_article, article_id
            )
        else:
            article = await anyio.to_thread.run_sync(self.library.reading_now)
        if article is None:
            return None
        highlights = await anyio.to_thread.run_sync(self.library.highlights, article.id, 20)
        return self._describe(article, [h.quote for h in highlights])

    def _describe(self, article: Article, quotes: list[str]) -> str:
        lines = [f"The user is reading article {article.id} now: {article.title}"]
        if article.author:
            lines.append(f"Author: {article.author}")
        if article.url:
            lines.append(f"Source: {article.url}")
        if quotes:
            lines.append("The user's highlights in it:")
            lines.extend(f"- {quote}" for quote in quotes)
        shown = article.body[: self._context_chars]
        cut = len(shown) < len(article.body)
        extent = f" (the first {len(shown)} of {len(article.body)} characters)" if cut else ""
        lines.append(f"Its text{extent}:")
        lines.append(shown)
        return "\n".join(lines)

    async def documents(self) -> AsyncIterator[CapabilityDocument]:
        """Every article, title and text, read a batch at a time."""
        last = 0
        while batch := await anyio.to_thread.run_sync(
            self.library.articles_after, last, DOCUMENT_BATCH
        ):
            for article in batch:
                yield CapabilityDocument(
                    document_id=article_document_id(article.id),
                    text=f"{article.title}\n\n{article.body}",
                    title=article.title,
                    source=article.url or f"reader://{article_document_id(article.id)}",
                )
            last = batch[-1].id

    async def close(self) -> None:
        """Close the library file."""
        await anyio.to_thread.run_sync(self.library.close)
