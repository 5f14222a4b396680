"""``ILexicalIndex`` on Tantivy (a Rust search library): BM25 with block-max WAND pruning.

FTS5 scores every passage that contains any query term before it can sort them (about a
microsecond each, so tens of milliseconds when a term is in a fifth of 100k passages);
Tantivy skips blocks of postings that cannot reach the current top k, which keeps a top-10
under a millisecond at that size. The price is a second store: each namespace is an index
folder under ``AGENT_DATA_DIR/tantivy``, outside the SQLite transaction. A Tantivy commit is
atomic (all of a batch or none), and ingestion's content hashes make a re-run repair a crash
between the stores.

Each passage is indexed in one field, ``terms`` (not stored): its text as ``segmented``
rewrites it (NFKC, Chinese and Japanese cut into words, CJK set apart from the digits and
Latin letters written against it), then Tantivy's simple tokenizer, lower-cased, folded to
ASCII and stemmed (English), as FTS5's ``porter unicode61 remove_diacritics`` does. The text
as written is kept in ``text``, stored and not indexed. Queries go through the same two steps
and are built as term queries on ``terms``, never parsed, so no input is read as query syntax.

The analyzer's name is recorded in each folder's schema: a folder whose ``terms`` were made
another way (before Chinese words were indexed, or before digits and Latin letters inside
Chinese text were set apart) is rebuilt once, from its stored texts, the first time it is
opened.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import anyio.to_thread
import tantivy

from core_agent.contracts.errors import StorageError
from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit
from core_agent.contracts.private_files import make_private_folder
from core_agent.contracts.settings import AgentSettings
from providers.lexical.cjk_segmentation import segmented
from providers.lexical.passages import check_passages, search_terms

T = TypeVar("T")
ANALYZER = "core_agent_terms_v2"
"""The analyzer of ``terms``, by a name each folder's schema records: rename it whenever the
terms of a text change (``segmented`` or the filters below), and older folders are rebuilt."""
WRITER_HEAP_BYTES = 20_000_000
"""Indexing memory of a write; a larger batch is flushed in several segments, merged later."""
LOCK_TIMEOUT_S = 30.0
"""How long a write waits for another writer (thread or process) to release the index."""


def _analyzer() -> Any:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    # Tantivy has no stored-only text field; a bytes field is stored and never analyzed.
    builder.add_bytes_field("text", stored=True, indexed=False)
    builder.add_text_field("terms", stored=False, tokenizer_name=ANALYZER, index_option="freq")
    return builder.build()


def _document(passage_id: str, text: str) -> Any:
    return tantivy.Document(id=passage_id, text=text.encode(), terms=segmented(text))


def _written(doc: Any) -> str:
    # Folders before ``ANALYZER`` was versioned stored the text in an analyzed text field.
    text = doc["text"][0]
    return text.decode() if isinstance(text, bytes) else str(text)


def _analyzer_of(folder: Path) -> str | None:
    """The analyzer the folder's ``terms`` were made with; ``None`` if it has no such field."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    for field in meta.get("schema", []):
        if field.get("name") == "terms":
            return str(field.get("options", {}).get("indexing", {}).get("tokenizer"))
    return None


def _rebuild(folder: Path) -> None:
    """Re-index a folder whose terms were made another way, from its stored texts.

    The new index is built beside the old one and swapped in by renames; a crash before the
    swap leaves the old index in place (rebuilt again next time), one after the first rename
    is finished by ``_finish_swap``.
    """
    old = tantivy.Index.open(str(folder))  # read only: its analyzer is not needed
    searcher = old.searcher()
    total = int(searcher.num_docs)
    passages = []
    if total:
        for _score, address in searcher.search(tantivy.Query.all_query(), total).hits:
            doc = searcher.doc(address)
            passages.append((doc["id"][0], _written(doc)))
    fresh = folder.with_name(folder.name + ".rebuilt")
    shutil.rmtree(fresh, ignore_errors=True)
    make_private_folder(fresh)
    index = tantivy.Index(_schema(), path=str(fresh), reuse=False)
    index.register_tokenizer(ANALYZER, _analyzer())
    writer = index.writer(WRITER_HEAP_BYTES, 1)
    for passage_id, text in passages:
        writer.add_document(_document(passage_id, text))
    writer.commit()
    writer.wait_merging_threads()
    del old, searcher, index, writer
    folder.rename(folder.with_name(folder.name + ".replaced"))
    _finish_swap(folder)


def _finish_swap(folder: Path) -> None:
    fresh = folder.with_name(folder.name + ".rebuilt")
    if not (folder / "meta.json").exists() and (fresh / "meta.json").exists():
        fresh.rename(folder)
    shutil.rmtree(folder.with_name(folder.name + ".replaced"), ignore_errors=True)


class _Namespace:
    """One index folder and the analyzer of its ``terms``."""

    def __init__(self, folder: Path, *, create: bool) -> None:
        self.folder = folder
        if create:
            make_private_folder(folder)
            self.index = tantivy.Index(_schema(), path=str(folder), reuse=True)
        else:
            if _analyzer_of(folder) != ANALYZER:
                _rebuild(folder)
            self.index = tantivy.Index.open(str(folder))
        self.analyzer = _analyzer()
        self.index.register_tokenizer(ANALYZER, self.analyzer)
        self.schema = self.index.schema

    def writer(self) -> Any:
        """A writer, waiting for one held elsewhere (Tantivy allows one per index)."""
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                return self.index.writer(WRITER_HEAP_BYTES, 1)
            except ValueError as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def commit(self, change: Callable[[Any], None]) -> None:
        """Apply ``change`` to a writer and commit it: all of it or, on any error, none."""
        writer = self.writer()
        try:
            change(writer)
            writer.commit()
        except BaseException:
            writer.rollback()
            raise
        finally:
            writer.wait_merging_threads()

    def live(self, searcher: Any, ids: Sequence[str]) -> int:
        query = tantivy.Query.term_set_query(self.schema, "id", list(ids))
        return int(searcher.search(query, 1, count=True).count)


class TantivyLexicalIndex(ILexicalIndex):
    """BM25 keyword search with Tantivy (see the module docstring)."""

    def __init__(self, root: Path | str) -> None:
        self._root = Path(root)
        self._namespaces: dict[str, _Namespace] = {}
        self._write_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> TantivyLexicalIndex:
        """The indexes under ``AGENT_DATA_DIR/tantivy``."""
        return cls(settings.data_dir / "tantivy")

    def _folder(self, namespace: str) -> Path:
        # Prefixed and with dots escaped: no namespace can name the root, "." or "..".
        return self._root / ("ns-" + quote(namespace, safe="").replace(".", "%2E"))

    def _existing(self, namespace: str) -> _Namespace | None:
        if self._closed:
            raise StorageError("the Tantivy index is closed")
        opened = self._namespaces.get(namespace)
        if opened is None:
            folder = self._folder(namespace)
            _finish_swap(folder)  # a rebuild cut short between its two renames
            if (folder / "meta.json").exists():
                with self._open_lock:
                    opened = self._namespaces.get(namespace)
                    if opened is None:
                        opened = self._namespaces[namespace] = _Namespace(folder, create=False)
        return opened

    def _created(self, namespace: str) -> _Namespace:
        opened = self._existing(namespace)
        if opened is None:
            opened = self._namespaces[namespace] = _Namespace(self._folder(namespace), create=True)
        return opened

    def _guard(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ValueError as exc:
            raise StorageError(f"tantivy {what}: {exc}") from exc

    async def add(self, namespace: str, passages: Sequence[tuple[str, str]]) -> None:
        """Index or re-index passages in one commit."""
        check_passages(passages)
        if not passages:
            return

        def change(writer: Any) -> None:
            for passage_id, text in passages:
                writer.delete_documents_by_term("id", passage_id)
                writer.add_document(_document(passage_id, text))

        def write() -> None:
            with self._write_lock:
                self._created(namespace).commit(change)

        await anyio.to_thread.run_sync(self._guard, "add", write)

    async def search(self, namespace: str, query: str, k: int) -> list[LexicalHit]:
        """BM25 top ``k``; the score is Tantivy's BM25 (larger is better)."""
        words = search_terms(query, k)

        def read() -> list[LexicalHit]:
            space = self._existing(namespace)
            if space is None or not words:
                return []
            tokens = list(dict.fromkeys(space.analyzer.analyze(" ".join(words))))
            if not tokens:
                return []
            should = tantivy.Occur.Should
            terms = tantivy.Query.boolean_query(
                [(should, tantivy.Query.term_query(space.schema, "terms", t)) for t in tokens]
            )
            # Another process may have committed since the last search.
            space.index.reload()
            searcher = space.index.searcher()
            hits = []
            for score, address in searcher.search(terms, k, count=False).hits:
                doc = searcher.doc(address)
                hits.append(LexicalHit(id=doc["id"][0], score=float(score), text=_written(doc)))
            return hits

        # Sub-millisecond: run inline rather than pay a thread hop.
        return self._guard("search", read)

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Remove passages in one commit; returns how many existed."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0

        def change(writer: Any) -> None:
            for passage_id in wanted:
                writer.delete_documents_by_term("id", passage_id)

        def write() -> int:
            with self._write_lock:
                space = self._existing(namespace)
                if space is None:
                    return 0
                space.index.reload()
                existing = space.live(space.index.searcher(), wanted)
                space.commit(change)
                return existing

        return await anyio.to_thread.run_sync(self._guard, "delete", write)

    async def count(self, namespace: str) -> int:
        """Passages in the namespace."""

        def read() -> int:
            space = self._existing(namespace)
            if space is None:
                return 0
            space.index.reload()
            return int(space.index.searcher().num_docs)

        return self._guard("count", read)

    async def close(self) -> None:
        """Forget the opened indexes; later calls raise ``StorageError``."""
        with self._write_lock:
            self._namespaces.clear()
            self._closed = True
