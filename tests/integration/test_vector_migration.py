"""Moving between backends and models: dual write, verify, resumable migrate, reembed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core_agent.container import KernelContainer, build_vector_store
from core_agent.contracts.errors import ConfigurationError, StorageError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.vector_store import VectorRecord
from core_agent.memory.vector_migration import (
    DualWriteVectorStore,
    migrate_vectors,
    reembed_namespace,
    staging_namespace,
    verify_vectors,
)
from providers.embedders.feature_hashing import FeatureHashingEmbedder
from providers.vectors.lancedb_store import LanceDBVectorStore
from providers.vectors.sqlite_vec_store import SqliteVecVectorStore

pytestmark = pytest.mark.anyio
MODEL = "m"


def records(n: int, dim: int = 8, seed: int = 1, prefix: str = "r") -> list[VectorRecord]:
    rng = random.Random(seed)
    return [
        VectorRecord(
            f"{prefix}{i:05d}",
            [rng.gauss(0, 1) for _ in range(dim)],
            f"text number {i} about topic {i % 9}",
            {"topic": i % 9},
        )
        for i in range(n)
    ]


async def test_dual_write_keeps_both_backends_consistent_and_verify_finds_a_difference(
    tmp_path: Path,
) -> None:
    settings = AgentSettings(data_dir=tmp_path, vector_migration_dual_write=True)
    store = build_vector_store(settings)
    assert isinstance(store, DualWriteVectorStore)
    assert isinstance(store.primary, SqliteVecVectorStore)
    assert isinstance(store.secondary, LanceDBVectorStore)
    try:
        await store.upsert("docs", records(120), embedding_model=MODEL)
        await store.delete("docs", ["r00003"])
        await store.upsert("notes", records(10, prefix="n"), embedding_model=MODEL)

        clean = await verify_vectors(store.primary, store.secondary, samples=15)
        assert [r.namespace for r in clean] == ["docs", "notes"]
        assert all(r.consistent for r in clean), clean
        assert clean[0].sampled == 15

        # Inject inconsistencies behind dual write's back.
        await store.secondary.delete("docs", ["r00010"])
        changed = records(120)[20]
        await store.secondary.upsert(
            "docs",
            [
                VectorRecord(
                    changed.id, [-v for v in changed.vector], changed.text, changed.metadata
                )
            ],
            embedding_model=MODEL,
        )
        [docs, notes] = await verify_vectors(store.primary, store.secondary, samples=119)
        assert not docs.consistent and notes.consistent
        assert docs.only_here == ["r00010"]
        assert docs.count == docs.other_count + 1
        assert "r00020" in docs.different_records
    finally:
        await store.close()


async def test_dual_write_survives_a_failing_target(tmp_path: Path) -> None:
    primary = SqliteVecVectorStore(tmp_path / "db.sqlite")
    secondary = LanceDBVectorStore(tmp_path / "lance")
    store = DualWriteVectorStore(primary, secondary)
    await secondary.close()  # the target is gone: every mirrored write fails
    await store.upsert("docs", records(5), embedding_model=MODEL)
    assert await primary.count("docs") == 5
    assert store.secondary_failures == 1
    with pytest.raises(StorageError):
        await secondary.count("docs")
    await primary.close()


def test_dual_write_needs_another_target(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="AGENT_VECTOR_MIGRATION_TARGET"):
        build_vector_store(
            AgentSettings(
                data_dir=tmp_path,
                vector_migration_dual_write=True,
                vector_migration_target="sqlite_vec",
            )
        )


async def test_migration_resumes_after_a_failure_half_way(tmp_path: Path) -> None:
    source = SqliteVecVectorStore(tmp_path / "db.sqlite")
    target = LanceDBVectorStore(tmp_path / "lance")
    await source.upsert("docs", records(250), embedding_model=MODEL)

    class DiesAfterTwoBatches(DualWriteVectorStore):
        batches = 0

        async def upsert(self, namespace, records_, *, embedding_model):  # type: ignore[no-untyped-def]
            if self.batches == 2:
                raise StorageError("disk unplugged")
            self.batches += 1
            await self.primary.upsert(namespace, records_, embedding_model=embedding_model)

    with pytest.raises(StorageError):
        await migrate_vectors(source, DiesAfterTwoBatches(target, target), batch_size=50)
    assert await target.count("docs") == 100

    [resumed] = await migrate_vectors(source, target, batch_size=50)
    assert (resumed.already_present, resumed.copied, resumed.total) == (100, 150, 250)
    assert all(r.consistent for r in await verify_vectors(source, target))
    [again] = await migrate_vectors(source, target)
    assert again.copied == 0
    await source.close()
    await target.close()


def _cli(data_dir: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env["AGENT_DATA_DIR"] = str(data_dir)
    return subprocess.Popen(
        [sys.executable, "-m", "core_agent.cli", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,  # type: ignore[call-overload]
    )


async def test_a_migration_killed_mid_way_resumes_and_verifies_clean(tmp_path: Path) -> None:
    source = SqliteVecVectorStore(tmp_path / "core_agent.db")
    await source.upsert("docs", records(3000, dim=16), embedding_model=MODEL)
    await source.close()

    first = _cli(
        tmp_path,
        "vectors",
        "migrate",
        "--from",
        "sqlite_vec",
        "--to",
        "lancedb",
        "--batch-size",
        "25",
    )
    assert first.stdout is not None
    first.stdout.readline()  # the plan
    first.stdout.readline()  # the first batch is in
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)  # reaps it and closes the pipes
    target = LanceDBVectorStore(tmp_path / "lancedb")
    copied_before_kill = await target.count("docs")
    assert 0 < copied_before_kill < 3000

    second = _cli(tmp_path, "vectors", "migrate", "--from", "sqlite_vec", "--to", "lancedb")
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert f"({copied_before_kill} already there" in out.splitlines()[0]

    check = _cli(tmp_path, "vectors", "verify", "--from", "sqlite_vec", "--to", "lancedb")
    out, err = check.communicate(timeout=300)
    assert check.returncode == 0, out + err
    assert out.strip().endswith("consistent")
    assert await target.count("docs") == 3000
    await target.close()


async def test_reembed_swaps_in_a_new_model_and_resumes(tmp_path: Path) -> None:
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path))
    pipeline = container.ingestion()
    for i in range(6):
        await pipeline.ingest_text(
            f"Document {i} talks about gardening and tomatoes {i}.", source=f"doc{i}"
        )
    store = container.vector_store()
    old = FeatureHashingEmbedder()
    new = FeatureHashingEmbedder(96)

    class Flaky(FeatureHashingEmbedder):
        calls = 0

        async def embed(self, texts):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 2:
                raise StorageError("interrupted")
            return await super().embed(texts)

    with pytest.raises(StorageError):
        await reembed_namespace(store, "default", Flaky(96), batch_size=2)
    info = await store.describe("default")
    assert info is not None and info.embedding_model == old.model_id  # readers unaffected
    assert await store.count(staging_namespace("default", new.model_id)) == 2

    assert await reembed_namespace(store, "default", new, batch_size=2) == 6
    info = await store.describe("default")
    assert info is not None and (info.embedding_model, info.dimension, info.count) == (
        new.model_id,
        96,
        6,
    )
    assert staging_namespace("default", new.model_id) not in await store.namespaces()
    [hit] = await store.search(
        "default", (await new.embed(["tomatoes 3"]))[0], 1, embedding_model=new.model_id
    )
    assert hit.record.text.startswith("Document 3")
    with pytest.raises(UsageError, match="already uses"):
        await reembed_namespace(store, "default", new)
    await store.close()
    await container.lexical_index().close()
    await container.document_catalog().close()
