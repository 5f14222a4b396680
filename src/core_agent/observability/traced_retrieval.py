"""Retrievals as ``retrieval`` spans, under whatever step asked for them.

``TracedRetriever`` wraps any ``IRetriever`` (the container wraps the one the
``knowledge_search`` tool uses): a retrieval made inside a traced step (a tool call) becomes a
``retrieval`` span under that step's span, found through ``current_span``, so neither the tool
nor the retriever needs a tracer. A retrieval outside any task (``core-agent search``) is not
traced.
"""

from __future__ import annotations

from typing import Any

from core_agent.contracts.retriever import IRetriever, RetrievalHit
from core_agent.observability.tracer import current_span


class TracedRetriever(IRetriever):
    """``inner``, with each retrieval inside a task written as a ``retrieval`` span.

    The span has the ``namespace``, ``k`` and what was found (``hits``: chunk and document
    ids, source, score), and with content recording the ``query`` and the ``passages`` (the
    hits' texts, in the same order).
    """

    def __init__(self, inner: IRetriever) -> None:
        self._inner = inner

    async def retrieve(
        self, query: str, k: int = 10, *, namespace: str = "default"
    ) -> list[RetrievalHit]:
        """See ``IRetriever.retrieve``."""
        current = current_span()
        if current is None:
            return await self._inner.retrieve(query, k, namespace=namespace)
        tracer, parent = current
        async with tracer.span(
            "retrieval", f"knowledge:{namespace}", parent_span_id=parent
        ) as span:
            span.attributes.update(namespace=namespace, k=k)
            if tracer.content:
                span.attributes["query"] = tracer.text(query)
            hits = await self._inner.retrieve(query, k, namespace=namespace)
            span.attributes["hits"] = [_hit(hit) for hit in hits]
            if tracer.content:
                span.attributes["passages"] = [tracer.text(hit.text) for hit in hits]
        return hits


def _hit(hit: RetrievalHit) -> dict[str, Any]:
    found: dict[str, Any] = {
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "score": round(hit.score, 6),
    }
    if hit.source is not None:
        found["source"] = hit.source
    return found
