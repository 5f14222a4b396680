"""Tools that let the model keep and find long-term memories and search ingested knowledge.

They depend on ports only (``IMemoryStore``, ``IRetriever``); the container passes the
semantic memory and the hybrid retriever. ``remember`` and ``forget`` declare ``write``, so
after untrusted content entered a task they need approval like any other write: that is
what keeps an injected page from planting a false "memory". A memory written by such a task
(approved or not) is stored as tainted, so whatever task later recalls it is tainted too.
What ``recall`` and ``knowledge_search`` return is stored data, so it is spotlighted as
untrusted (``read``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from core_agent.contracts.memory_store import IMemoryStore
from core_agent.contracts.retriever import IRetriever
from core_agent.contracts.tool import ITool, ToolContext
from core_agent.tooling.function_tool import FunctionTool

MAX_VALUE_CHARS = 4000


def memory_tools(
    store_factory: Callable[[], IMemoryStore], *, namespace: str = "default"
) -> list[ITool]:
    """``remember``, ``recall`` and ``forget`` over long-term memory in ``namespace``.

    The store is built on the first call, so listing tools opens no database.
    """

    async def remember(
        key: Annotated[str, Field(min_length=1, max_length=200)],
        value: Annotated[str, Field(min_length=1, max_length=MAX_VALUE_CHARS)],
        context: ToolContext,
    ) -> dict[str, Any]:
        """Remember a fact or preference for later tasks, replacing any value under the key.

        Args:
            key: A short, stable name, e.g. "user.preferred_language".
            value: What to remember, as a self-contained sentence or value.
            context: The calling task (its taint is recorded with the memory).
        """
        item = await store_factory().put(
            "long_term", namespace, key, value, tainted=context.tainted
        )
        return {"remembered": item.key, "updated_at": item.updated_at.isoformat()}

    async def recall(
        query: Annotated[str, Field(min_length=1, max_length=1000)],
        limit: Annotated[int, Field(ge=1, le=20)] = 5,
    ) -> list[dict[str, Any]]:
        """Find remembered facts and preferences relevant to a query, most relevant first.

        Args:
            query: What you want to know, in words.
            limit: At most this many memories.
        """
        items = await store_factory().search("long_term", namespace, query, limit)
        return [
            {"key": item.key, "value": item.value, "updated_at": item.updated_at.isoformat()}
            for item in items
        ]

    async def forget(key: Annotated[str, Field(min_length=1, max_length=200)]) -> dict[str, Any]:
        """Delete a remembered fact or preference by its key.

        Args:
            key: The key it was remembered under.
        """
        existed = await store_factory().delete("long_term", namespace, key)
        return {"forgotten": key, "existed": existed}

    return [
        FunctionTool(remember, capabilities={"write"}),
        FunctionTool(recall, capabilities={"read"}, idempotent=True),
        FunctionTool(forget, capabilities={"write"}),
    ]


def knowledge_search_tool(
    retriever_factory: Callable[[], IRetriever], *, namespace: str = "default"
) -> ITool:
    """``knowledge_search`` over the documents ingested into ``namespace`` (built lazily)."""

    async def knowledge_search(
        query: Annotated[str, Field(min_length=1, max_length=1000)],
        k: Annotated[int, Field(ge=1, le=20)] = 5,
    ) -> list[dict[str, Any]]:
        """Search the ingested documents (keyword and semantic); returns passages with sources.

        Args:
            query: Words to search for.
            k: How many passages to return.
        """
        hits = await retriever_factory().retrieve(query, k, namespace=namespace)
        return [
            {
                "rank": rank,
                "text": hit.text,
                "source": hit.source,
                "document_id": hit.document_id,
                "chunk_id": hit.chunk_id,
                "offsets": [hit.start_offset, hit.end_offset],
                "score": round(hit.score, 6),
                "scores": {side: round(value, 4) for side, value in hit.scores.items()},
            }
            for rank, hit in enumerate(hits, start=1)
        ]

    return FunctionTool(knowledge_search, capabilities={"read"}, idempotent=True)
