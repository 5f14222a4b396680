"""The reader's tools: search the library, read an article, list and save highlights.

Reading tools declare ``read``: what they return is the user's saved web content, so the
kernel shows it to the model as untrusted data and marks the task tainted. Saving a highlight
declares ``write``, and the reader's policy rule (``policy.toml``) grades it high, so a human
approves it first. Results are JSON text, Chinese kept as is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, TypeVar

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from business_adapters.reader.library import ReaderLibrary
from core_agent.contracts.errors import ToolExecutionError, UsageError
from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.tool import Capability, ToolContext

T = TypeVar("T")
A = TypeVar("A", bound=BaseModel)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


class LibraryTool(ModelArgumentsTool[A]):
    """A tool over the library: its calls run in a worker thread."""

    def __init__(self, library: ReaderLibrary) -> None:
        super().__init__()
        self._library = library

    async def _call(self, work: Callable[[], T]) -> T:
        """``work`` in a thread; the library's refusals become messages for the model."""
        try:
            return await anyio.to_thread.run_sync(work)
        except UsageError as exc:
            raise ToolExecutionError(str(exc), tool_name=self.name) from exc


class SearchArticlesArguments(BaseModel):
    """Arguments of ``search_articles``."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(
        min_length=1,
        max_length=200,
        description="Words the article must contain, separated by spaces; each matches as a "
        "substring of the title or text (Chinese: short key words, e.g. '量子 纠错').",
    )
    limit: int = Field(default=10, ge=1, le=50, description="At most this many articles.")


class SearchArticlesTool(LibraryTool[SearchArticlesArguments]):
    """Find saved articles by words they contain."""

    name: ClassVar[str] = "search_articles"
    description: ClassVar[str] = (
        "Search the user's saved articles for ones whose title or text contains every word of "
        "the query; returns ids, titles and an excerpt around the first match, best first."
    )
    arguments_model: ClassVar[type[BaseModel]] = SearchArticlesArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    async def execute(self, args: SearchArticlesArguments, context: ToolContext) -> str:
        """The matching articles, or a note that none matches."""
        hits = await self._call(partial(self._library.search, args.query, args.limit))
        if not hits:
            return (
                f"No saved article contains every word of {args.query!r}; try fewer or "
                "shorter words."
            )
        return _json([dataclasses.asdict(hit) for hit in hits])


class GetArticleArguments(BaseModel):
    """Arguments of ``get_article``."""

    model_config = ConfigDict(extra="forbid")
    article_id: int = Field(ge=1, description="The article's id (from search_articles).")
    start: int = Field(default=0, ge=0, description="Character offset to read from.")
    max_chars: int = Field(default=6000, ge=200, le=20000, description="How much text to read.")


class GetArticleTool(LibraryTool[GetArticleArguments]):
    """Read a saved article's text."""

    name: ClassVar[str] = "get_article"
    description: ClassVar[str] = (
        "Read a saved article: title, URL, author and its text from `start`, up to "
        "`max_chars` characters (`total_chars` tells whether there is more)."
    )
    arguments_model: ClassVar[type[BaseModel]] = GetArticleArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    async def execute(self, args: GetArticleArguments, context: ToolContext) -> str:
        """The article's fields and the slice of its text asked for."""
        article = await self._call(partial(self._library.get_article, args.article_id))
        end = min(args.start + args.max_chars, len(article.body))
        return _json(
            {
                "id": article.id,
                "title": article.title,
                "url": article.url,
                "author": article.author,
                "added_at": article.added_at,
                "start": args.start,
                "end": end,
                "total_chars": len(article.body),
                "text": article.body[args.start : end],
            }
        )


class ListHighlightsArguments(BaseModel):
    """Arguments of ``list_highlights``."""

    model_config = ConfigDict(extra="forbid")
    article_id: int | None = Field(
        default=None, ge=1, description="Only this article's highlights; all when absent."
    )
    limit: int = Field(default=50, ge=1, le=200, description="At most this many.")


class ListHighlightsTool(LibraryTool[ListHighlightsArguments]):
    """List the passages the user highlighted."""

    name: ClassVar[str] = "list_highlights"
    description: ClassVar[str] = (
        "List the user's highlights (quoted passages and notes), of one article or of all, "
        "oldest first."
    )
    arguments_model: ClassVar[type[BaseModel]] = ListHighlightsArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.READ})
    idempotent: ClassVar[bool] = True

    async def execute(self, args: ListHighlightsArguments, context: ToolContext) -> str:
        """The highlights as JSON, or a note that there are none."""
        found = await self._call(partial(self._library.highlights, args.article_id, args.limit))
        if not found:
            return "No highlights yet."
        return _json([dataclasses.asdict(item) for item in found])


class SaveHighlightArguments(BaseModel):
    """Arguments of ``save_highlight``."""

    model_config = ConfigDict(extra="forbid")
    article_id: int = Field(ge=1, description="The article the passage is from.")
    quote: str = Field(
        min_length=1, max_length=2000, description="The passage, copied exactly from the text."
    )
    note: str | None = Field(default=None, max_length=2000, description="The user's note.")


class SaveHighlightTool(LibraryTool[SaveHighlightArguments]):
    """Save a highlight in the user's library (asks the user first)."""

    name: ClassVar[str] = "save_highlight"
    description: ClassVar[str] = (
        "Save a passage of an article as a highlight in the user's library, with an optional "
        "note. The user is asked to approve it first."
    )
    arguments_model: ClassVar[type[BaseModel]] = SaveHighlightArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.WRITE})
    # Saved under the call's idempotency key: running it again saves nothing twice.
    idempotent: ClassVar[bool] = True

    async def execute(self, args: SaveHighlightArguments, context: ToolContext) -> str:
        """The saved highlight (or the one this call saved before)."""
        highlight, created = await self._call(
            partial(
                self._library.save_highlight,
                args.article_id,
                args.quote,
                note=args.note,
                request_key=context.idempotency_key,
            )
        )
        return _json({"saved": created, "highlight": dataclasses.asdict(highlight)})
