"""A reading app's capabilities: its library of articles and highlights, as tools and context.

Enable with ``AGENT_CAPABILITIES=reader``; the library is ``READER_LIBRARY_PATH`` (default
``$AGENT_DATA_DIR/reader/library.db``). ``core-agent ingest --capability reader`` makes its
articles searchable with ``knowledge_search``. See the README, "Business capabilities".
"""

from business_adapters.reader.capability import ARTICLE_METADATA_KEY, ReaderCapability
from business_adapters.reader.library import Article, ArticleHit, Highlight, ReaderLibrary
from business_adapters.reader.settings import ReaderSettings

__all__ = [
    "ARTICLE_METADATA_KEY",
    "Article",
    "ArticleHit",
    "Highlight",
    "ReaderCapability",
    "ReaderLibrary",
    "ReaderSettings",
]
