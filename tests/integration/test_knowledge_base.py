"""Ingestion and hybrid retrieval on the real stores, wired by the container."""

from __future__ import annotations

import itertools
import json
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core_agent.container import KernelContainer, create_kernel
from core_agent.contracts.errors import EmbeddingMismatchError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.memory.ingestion import chunk_id
from fakes.lexical import FakeFlakyLexicalIndex
from providers.embedders.feature_hashing import FeatureHashingEmbedder
from shared.agent_protocol import TaskRequest

pytestmark = pytest.mark.anyio

DOCS = {
    "retrieval.md": "# Retrieval\n\nHybrid retrieval fuses BM25 keyword search with vector "
    "search by reciprocal rank fusion.\n\nEach hit keeps its provenance: document, chunk "
    "and offsets.\n",
    "pets.txt": "Cats sleep most of the day. Dogs like long walks in the park.\n",
    "page.html": "<html><head><title>Storage</title><style>p{}</style></head><body>"
    "<h1>Local storage</h1><p>sqlite-vec keeps vectors in the same SQLite file.</p>"
    "<script>alert('not text')</script><p>LanceDB keeps a folder per namespace.</p></body></html>",
}


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose text layer says ``text`` (Helvetica, no compression)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    (folder / "sub" / "manual.pdf").write_bytes(minimal_pdf("Approval gates guard risky tools"))
    (folder / ".hidden" / "secret.txt").write_text("never ingested")
    (folder / "image.png").write_bytes(b"\x89PNG")
    return folder


@pytest.fixture(params=["sqlite_vec", "lancedb"])
async def kb(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KernelContainer]:
    container = KernelContainer()
    container.settings.override(
        AgentSettings(
            data_dir=tmp_path / "data",
            vector_provider=request.param,
            chunk_tokens=64,
            chunk_overlap_tokens=8,
        )
    )
    yield container
    await container.vector_store().close()
    await container.lexical_index().close()
    await container.document_catalog().close()


async def test_ingest_then_retrieve_with_scores_and_provenance(
    kb: KernelContainer, corpus: Path
) -> None:
    results = await kb.ingestion().ingest_path(corpus)

    assert sorted(Path(r.source).name for r in results) == [
        "manual.pdf",
        "page.html",
        "pets.txt",
        "retrieval.md",
    ]
    assert all(r.status == "ingested" and r.chunks >= 1 for r in results)

    hits = await kb.retriever().retrieve("keyword search fusion", 3)
    top = hits[0]
    assert top.source is not None and top.source.endswith("retrieval.md")
    assert set(top.scores) == {"lexical", "vector"} and set(top.ranks) == {"lexical", "vector"}
    source_text = (corpus / "retrieval.md").read_text()
    assert top.start_offset is not None and top.end_offset is not None
    assert source_text[top.start_offset : top.end_offset] == top.text
    assert top.chunk_id == chunk_id(top.document_id, 0)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))

    html = await kb.retriever().retrieve("folder per namespace", 1)
    assert html[0].source is not None and html[0].source.endswith("page.html")
    assert "alert" not in html[0].text and "p{}" not in html[0].text
    pdf = await kb.retriever().retrieve("approval gates", 1)
    assert pdf[0].source is not None and pdf[0].source.endswith("manual.pdf")


async def test_reingesting_unchanged_content_is_a_no_op_and_changes_replace_chunks(
    kb: KernelContainer, corpus: Path
) -> None:
    pipeline = kb.ingestion()
    await pipeline.ingest_path(corpus)
    vectors_before = await kb.vector_store().count("default")

    again = await pipeline.ingest_path(corpus)
    assert {r.status for r in again} == {"unchanged"}
    assert await kb.vector_store().count("default") == vectors_before

    long_text = " ".join(f"Paragraph {i} about walks and parks." for i in range(80))
    (corpus / "pets.txt").write_text(long_text)
    [changed] = [r for r in await pipeline.ingest_path(corpus) if r.status == "ingested"]
    assert changed.chunks > 1
    (corpus / "pets.txt").write_text("Only one short line now.")
    [shrunk] = [r for r in await pipeline.ingest_path(corpus) if r.status == "ingested"]
    assert shrunk.chunks == 1
    ids = await kb.vector_store().ids("default")
    assert chunk_id(shrunk.document_id, 1) not in ids  # stale chunks are gone
    assert await kb.lexical_index().search("default", "paragraph walks", 5) == []


async def test_bad_documents_fail_alone_and_write_nothing(
    kb: KernelContainer, tmp_path: Path
) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "good.txt").write_text("A perfectly fine document about gardens.")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (folder / "empty.md").write_text("   \n\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    kb.settings.override(kb.settings().model_copy(update={"ingest_max_bytes": 200}))
    (folder / "huge.txt").write_text("big " * 1000)

    results = {Path(r.source).name: r for r in await kb.ingestion().ingest_path(folder)}

    assert results["good.txt"].status == "ingested"
    for name, message in {
        "latin1.txt": "not UTF-8",
        "empty.md": "no text",
        "broken.pdf": "not a readable PDF",
        "huge.txt": "over the 200-byte limit",
    }.items():
        assert results[name].status == "failed", name
        assert message in (results[name].error or ""), results[name].error
    assert await kb.vector_store().count("default") == 1
    assert await kb.lexical_index().count("default") == 1
    assert [d.source for d in await kb.document_catalog().list("default")] == [
        str(folder / "good.txt")
    ]

    with pytest.raises(UsageError, match="does not exist"):
        await kb.ingestion().ingest_path(tmp_path / "missing")
    with pytest.raises(UsageError, match=r"no loader reads \.png"):
        await kb.ingestion().ingest_path(_png(tmp_path))


def _png(folder: Path) -> Path:
    path = folder / "x.png"
    path.write_bytes(b"\x89PNG" + zlib.compress(b"x"))
    return path


async def test_mixing_embedding_models_is_refused_before_writing(
    kb: KernelContainer, corpus: Path
) -> None:
    await kb.ingestion().ingest_path(corpus / "pets.txt")
    kb.embedder.override(FeatureHashingEmbedder(128))
    kb.ingestion.reset()
    kb.retriever.reset()

    with pytest.raises(EmbeddingMismatchError, match="reembed"):
        await kb.ingestion().ingest_text("Another text", source="other")
    with pytest.raises(EmbeddingMismatchError):
        await kb.retriever().retrieve("cats")
    assert await kb.vector_store().count("default") == 1
    assert await kb.document_catalog().get("default", "other") is None


async def test_retrieval_input_errors_are_clear(kb: KernelContainer) -> None:
    with pytest.raises(UsageError, match="empty"):
        await kb.retriever().retrieve("  ")
    with pytest.raises(UsageError, match="k must be"):
        await kb.retriever().retrieve("x", 0)
    assert await kb.retriever().retrieve("nothing ingested yet") == []


async def test_a_folder_reaches_the_keyword_index_in_batches_and_a_failed_batch_is_redone(
    kb: KernelContainer, tmp_path: Path
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for n in range(30):
        (folder / f"note{n:02d}.md").write_text(f"Note {n} mentions the word heron{n}.")
    flaky = FakeFlakyLexicalIndex(kb.lexical_index(), fail_adds=1)
    kb.lexical_index.override(flaky)

    failed = await kb.ingestion().ingest_path(folder)
    assert [Path(r.source).name for r in failed] == sorted(p.name for p in folder.iterdir())
    assert {r.status for r in failed} == {"failed"}
    assert all("injected" in (r.error or "") for r in failed)
    assert await kb.document_catalog().list("default") == []  # no record: redone next time

    done = await kb.ingestion().ingest_path(folder)
    assert {r.status for r in done} == {"ingested"}
    assert flaky.adds == [30]  # one keyword write for the whole folder
    assert len(await kb.document_catalog().list("default")) == 30
    [hit] = await kb.retriever().retrieve("heron17", 1)
    assert hit.source == str(folder / "note17.md") and hit.ranks.get("lexical") == 1


async def test_a_kernel_ingests_and_its_tasks_search_what_it_ingested(tmp_path: Path) -> None:
    """``kernel.ingest`` is ``core-agent ingest`` from Python, on the kernel's own stores."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "pets.txt").write_text(DOCS["pets.txt"])
    (folder / "保修.txt").write_text("保修政策：所有电器产品享受两年免费保修。", encoding="utf-8")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "knowledge_search", "arguments": {"query": "电器保修"}}]},
                {"content": "两年。"},
            ]
        )
    )
    settings = AgentSettings(
        data_dir=tmp_path / "data", scripted_model_script=script, knowledge_namespace="shop"
    )
    async with create_kernel(settings) as kernel:
        results = await kernel.ingest(str(folder))
        assert [(Path(r.source).name, r.status) for r in results] == [
            ("pets.txt", "ingested"),
            ("保修.txt", "ingested"),
        ]
        answer = await kernel.execute_task(TaskRequest(task="电器的保修期是多久？"))
        [searched] = [
            e for e in await kernel.task_events(answer.task_id) if e.kind == "tool.completed"
        ]
        hits = json.loads(searched.result.content)
        assert Path(hits[0]["source"]).name == "保修.txt"
        assert {r.status for r in await kernel.ingest(folder)} == {"unchanged"}
        other = await kernel.ingest(folder / "pets.txt", namespace="elsewhere")
        assert [r.status for r in other] == ["ingested"]
        with pytest.raises(UsageError, match="does not exist"):
            await kernel.ingest(tmp_path / "missing")
    # The kernel closed the stores it opened to ingest: another kernel reads the same data.
    async with create_kernel(settings) as kernel:
        assert {r.status for r in await kernel.ingest(folder, force=True)} == {"ingested"}
