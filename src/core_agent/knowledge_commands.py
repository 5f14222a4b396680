"""The knowledge base from the terminal: ``ingest``, ``search``, ``keywords``, ``vectors``.

Kept apart from ``cli`` so the command parser stays small and its start-up fast: this module
is imported only when one of these commands runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from core_agent.container import (
    CAPABILITIES,
    SHIPPED_VECTOR_STORES,
    VECTOR_STORES,
    KernelContainer,
    installed_providers,
    load_provider,
)
from core_agent.contracts.business_capability_provider import IBusinessCapabilityProvider
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.vector_store import IVectorStore
from core_agent.memory.ingestion import IngestProgress
from core_agent.memory.vector_migration import (
    MigrationProgress,
    ReembedProgress,
    migrate_vectors,
    reembed_namespace,
    verify_vectors,
)
from core_agent.safety.terminal_text import printable

EXIT_OK, EXIT_FAILED = 0, 1


def _container() -> KernelContainer:
    container = KernelContainer()
    container.settings.override(AgentSettings())
    return container


def _store(settings: AgentSettings, name: str) -> IVectorStore:
    return load_provider(VECTOR_STORES, name, settings, IVectorStore)  # type: ignore[type-abstract]


def _other_backend(settings: AgentSettings) -> str:
    if settings.vector_migration_target:
        return settings.vector_migration_target
    others = [n for n in SHIPPED_VECTOR_STORES if n != settings.vector_provider]
    return others[0] if others else settings.vector_provider


async def ingest(args: argparse.Namespace) -> int:
    """Ingest a path, or a capability's documents, with a progress bar; exit 1 on a failure.

    A capability (``--capability NAME``, any installed one) is synchronised: its new and
    changed documents ingested, those it no longer offers removed.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    if (args.path is None) == (args.capability is None):
        raise UsageError("give a path to ingest, or --capability NAME (one of them)")
    container = _container()
    settings = container.settings()
    namespace = args.namespace or settings.knowledge_namespace
    capability = (
        load_provider(CAPABILITIES, args.capability, settings, IBusinessCapabilityProvider)  # type: ignore[type-abstract]
        if args.capability
        else None
    )
    pipeline = container.ingestion()
    console = Console(stderr=True)
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[chunks]} chunks"),
            console=console,
            transient=True,
            disable=args.json or not console.is_terminal,
        ) as bar:
            task = bar.add_task("ingesting", total=None, chunks=0)

            def report(state: IngestProgress) -> None:
                name = Path(state.current).name if state.current else ""
                bar.update(
                    task,
                    total=state.documents_total,
                    completed=state.documents_done,
                    chunks=state.chunks_written,
                    description=f"ingesting {name[:40]}",
                )

            if capability is not None:
                results = await pipeline.ingest_capability(
                    capability, namespace=namespace, force=args.force, progress=report
                )
            else:
                results = await pipeline.ingest_path(
                    Path(args.path), namespace=namespace, force=args.force, progress=report
                )
    finally:
        if capability is not None:
            await capability.close()
        await _close(container)
    if args.json:
        for result in results:
            print(json.dumps(dataclasses.asdict(result)))
    else:
        counts = {
            s: sum(r.status == s for r in results)
            for s in ("ingested", "unchanged", "failed", "removed")
        }
        chunks = sum(r.chunks for r in results if r.status == "ingested")
        for result in results:
            if result.status == "failed":
                shown = printable(f"{result.source}: {result.error}", newlines=False)
                print(f"failed: {shown}", file=sys.stderr)
        print(
            f"{counts['ingested']} ingested ({chunks} chunks), {counts['unchanged']} unchanged, "
            f"{counts['failed']} failed, into namespace {namespace!r}"
            + (f"; {counts['removed']} removed" if counts["removed"] else "")
        )
    return EXIT_FAILED if any(r.status == "failed" for r in results) else EXIT_OK


async def search(args: argparse.Namespace) -> int:
    """Print ranked passages with their scores."""
    container = _container()
    settings = container.settings()
    namespace = args.namespace or settings.knowledge_namespace
    try:
        hits = await container.retriever().retrieve(args.query, args.k, namespace=namespace)
        indexed = await container.lexical_index().count(namespace)
        stored = await container.vector_store().count(namespace)
    finally:
        await _close(container)
    if indexed < stored:
        print(
            f"note: the keyword index ({settings.lexical_index}) holds {indexed} of the "
            f"{stored} chunks in {namespace!r}; run `core-agent keywords rebuild"
            f" --namespace {namespace}` to fill it",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps([dataclasses.asdict(hit) for hit in hits], indent=2))
        return EXIT_OK
    if not hits:
        print(f"No passage in namespace {namespace!r} matches.")
    for rank, hit in enumerate(hits, start=1):
        sides = "  ".join(
            f"{side} {value:.3f} (#{hit.ranks[side]})" for side, value in hit.scores.items()
        )
        where = f"{hit.source or hit.document_id}:{hit.start_offset}-{hit.end_offset}"
        print(f"{rank:>2}. {hit.score:.4f}  {sides}\n    {printable(where, newlines=False)}")
        snippet = printable(" ".join(hit.text.split()), newlines=False)
        print(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    return EXIT_OK


async def keywords(args: argparse.Namespace) -> int:
    """``keywords rebuild``: fill the keyword index from the stored chunks."""
    container = _container()
    settings = container.settings()
    namespace = args.namespace or settings.knowledge_namespace
    try:
        total = await container.ingestion().reindex_keywords(namespace)
    finally:
        await _close(container)
    if args.json:
        print(
            json.dumps({"namespace": namespace, "indexed": total, "index": settings.lexical_index})
        )
    else:
        print(f"indexed {total} chunks of {namespace!r} with {settings.lexical_index}")
    return EXIT_OK


async def vectors(args: argparse.Namespace) -> int:
    """Dispatch ``vectors`` actions."""
    settings = AgentSettings()
    action = args.vectors_command
    if action == "info":
        return await _info(settings, args)
    if action == "migrate":
        return await _migrate(settings, args)
    if action == "verify":
        return await _verify(settings, args)
    return await _reembed(args)


async def _info(settings: AgentSettings, args: argparse.Namespace) -> int:
    store = _store(settings, args.provider or settings.vector_provider)
    try:
        rows = [await store.describe(ns) for ns in await store.namespaces()]
    finally:
        await store.close()
    found = [dataclasses.asdict(row) for row in rows if row is not None]
    if args.json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    if not found:
        print("No vector namespaces.")
    for row in found:
        print(
            f"{row['namespace']}: {row['count']} vectors, {row['dimension']} dims, "
            f"{row['embedding_model']}"
        )
    return EXIT_OK


async def _migrate(settings: AgentSettings, args: argparse.Namespace) -> int:
    from core_agent.contracts.errors import ProviderNotFoundError, UsageError

    if args.source == args.target:
        raise UsageError("--from and --to name the same backend")
    installed = installed_providers(VECTOR_STORES)
    for name in (args.source, args.target):
        if name not in installed:
            # Checked before opening either store, so a typo leaves nothing open.
            raise ProviderNotFoundError(VECTOR_STORES, name, installed)
    source, target = _store(settings, args.source), _store(settings, args.target)

    def report(state: MigrationProgress) -> None:
        print(
            f"{state.namespace}: {state.already_present + state.copied}/{state.total} "
            f"({state.already_present} already there, {state.copied} copied)",
            file=sys.stderr if args.json else sys.stdout,
            flush=True,
        )

    try:
        done = await migrate_vectors(
            source,
            target,
            namespaces=args.namespace,
            batch_size=args.batch_size,
            overwrite=args.overwrite,
            progress=report,
        )
    finally:
        await source.close()
        await target.close()
    copied = sum(n.copied for n in done)
    if args.json:
        print(
            json.dumps(
                {
                    "from": args.source,
                    "to": args.target,
                    "copied": copied,
                    "namespaces": [dataclasses.asdict(n) for n in done],
                },
                indent=2,
            )
        )
    else:
        print(
            f"migrated {len(done)} namespace(s) from {args.source} to {args.target}: "
            f"{copied} copied"
        )
    return EXIT_OK


async def _verify(settings: AgentSettings, args: argparse.Namespace) -> int:
    source_name = args.source or settings.vector_provider
    target_name = args.target or _other_backend(settings)
    source, target = _store(settings, source_name), _store(settings, target_name)
    try:
        reports = await verify_vectors(
            source, target, namespaces=args.namespace, samples=args.samples
        )
    finally:
        await source.close()
        await target.close()
    consistent = all(r.consistent for r in reports)
    if args.json:
        print(
            json.dumps(
                {
                    "from": source_name,
                    "to": target_name,
                    "consistent": consistent,
                    "namespaces": [
                        {**dataclasses.asdict(r), "consistent": r.consistent} for r in reports
                    ],
                },
                indent=2,
            )
        )
    else:
        for r in reports:
            state = "consistent" if r.consistent else "DIFFERENT"
            print(
                f"{r.namespace}: {state} ({source_name} {r.count}, {target_name} {r.other_count})"
            )
            if r.identity != r.other_identity:
                print(f"  embedding identity: {r.identity} vs {r.other_identity}")
            for label, ids in (
                (f"only in {source_name}", r.only_here),
                (f"only in {target_name}", r.only_there),
                ("records that differ", r.different_records),
                ("queries with other neighbours", r.different_neighbours),
            ):
                if ids:
                    shown = ", ".join(ids[:10]) + (" ..." if len(ids) > 10 else "")
                    print(f"  {label} ({len(ids)}): {shown}")
        print("consistent" if consistent else "inconsistent")
    return EXIT_OK if consistent else EXIT_FAILED


async def _reembed(args: argparse.Namespace) -> int:
    container = _container()
    store = container.vector_store()
    embedder = container.embedder()
    catalog = container.document_catalog()

    def report(state: ReembedProgress) -> None:
        out = sys.stderr if args.json else sys.stdout
        print(f"{state.namespace}: {state.done}/{state.total} embedded", file=out, flush=True)

    try:
        total = await reembed_namespace(store, args.namespace, embedder, progress=report)
        # Documents now carry the new model: re-ingesting unchanged files stays a no-op.
        for record in await catalog.list(args.namespace):
            await catalog.put(dataclasses.replace(record, embedding_model=embedder.model_id))
    finally:
        await _close(container)
    if args.json:
        print(
            json.dumps({"namespace": args.namespace, "embedded": total, "model": embedder.model_id})
        )
    else:
        print(f"re-embedded {total} vectors of {args.namespace!r} with {embedder.model_id}")
    return EXIT_OK


async def _close(container: KernelContainer) -> None:
    """Close the stores the command opened."""
    await container.opened().close()
