"""A capability's documents are synchronised into retrieval: ingested, skipped, removed."""

from collections.abc import AsyncIterator

import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.business_capability_provider import CapabilityDocument
from core_agent.contracts.errors import UsageError
from fakes.capabilities import FakeCapability

pytestmark = pytest.mark.anyio


def doc(document_id: str, text: str) -> CapabilityDocument:
    return CapabilityDocument(document_id=document_id, text=text, title=document_id)


async def statuses(container: KernelContainer, app: FakeCapability) -> dict[str, str]:
    results = await container.ingestion().ingest_capability(app)
    return {r.document_id.removeprefix("capability:app:"): r.status for r in results}


async def test_a_sync_ingests_skips_removes_and_reports_failures(container) -> None:
    app = FakeCapability("app", documents=[doc("a", "苹果的营养价值很高。"), doc("b", "香蕉。")])
    other = FakeCapability("other", documents=[doc("a", "Someone else's document.")])
    try:
        assert await statuses(container, app) == {"a": "ingested", "b": "ingested"}
        await container.ingestion().ingest_capability(other)
        app.offered = [doc("a", "苹果的营养价值很高。"), doc("c", "   "), doc("d", "葡萄。")]
        assert await statuses(container, app) == {
            "a": "unchanged",
            "b": "removed",
            "c": "failed",  # no text: reported, the others go on
            "d": "ingested",
        }
        ids = {r.document_id for r in await container.document_catalog().list("default")}
    finally:
        await container.opened().close()
    # Another capability's document of the same id is its own, and untouched.
    assert ids == {"capability:app:a", "capability:app:d", "capability:other:a"}


async def test_a_failing_or_repeating_source_removes_nothing(container) -> None:
    class Breaking(FakeCapability):
        async def documents(self) -> AsyncIterator[CapabilityDocument]:
            yield doc("x", "第一篇。")
            raise OSError("the app's database went away")

    app = FakeCapability("app", documents=[doc("old", "旧文章。")])
    try:
        await container.ingestion().ingest_capability(app)
        with pytest.raises(OSError, match="went away"):
            await container.ingestion().ingest_capability(Breaking("app"))
        app.offered = [doc("y", "一。"), doc("y", "二。")]
        with pytest.raises(UsageError, match="offered twice"):
            await container.ingestion().ingest_capability(app)
        ids = {r.document_id for r in await container.document_catalog().list("default")}
    finally:
        await container.opened().close()
    assert ids == {"capability:app:old", "capability:app:x", "capability:app:y"}
