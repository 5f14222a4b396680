"""The reading app's own library: articles, highlights and what the user is reading now.

One SQLite file (WAL, so the app and the kernel can use it from two processes), its schema
created when absent. Searching is SQLite FTS5 with the ``trigram`` tokenizer: it indexes
every three-character run of the text, so a query matches as a substring in any script,
Chinese included, with no word segmentation and no dictionary (the adapter may not use the
kernel's providers, and a substring is what a reader means by "the article that says ...").
Terms shorter than three characters (most Chinese words are two) cannot use a trigram index
and are matched with ``LIKE`` instead, still as substrings; results are ranked by BM25 when a
term used the index, the title weighing ten times the body.

Every method blocks on the database; async callers run them in a worker thread. One
connection is shared by all threads, one call at a time.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from core_agent.contracts.errors import ConfigurationError, StorageError, UsageError
from core_agent.contracts.private_files import (
    create_private_file,
    make_private_folder,
    secure_private_file,
)

T = TypeVar("T")

SCHEMA_VERSION = 1
TITLE_WEIGHT = 10.0
SNIPPET_CHARS = 80
MAX_TERMS = 10
TRIGRAM = 3
_SEPARATORS = re.compile(r"[\s,.;:!?\"'()\[\]{}<>，。、；：！？（）《》〈〉「」『』【】“”‘’…—]+")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS articles (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    url TEXT,
    author TEXT,
    added_at TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS articles_fts USING fts5(
    title, body, content='articles', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER IF NOT EXISTS articles_ai AFTER INSERT ON articles BEGIN
    INSERT INTO articles_fts(rowid, title, body) VALUES (new.id, new.title, new.body);
END;
CREATE TRIGGER IF NOT EXISTS articles_ad AFTER DELETE ON articles BEGIN
    INSERT INTO articles_fts(articles_fts, rowid, title, body)
    VALUES ('delete', old.id, old.title, old.body);
END;
CREATE TRIGGER IF NOT EXISTS articles_au AFTER UPDATE ON articles BEGIN
    INSERT INTO articles_fts(articles_fts, rowid, title, body)
    VALUES ('delete', old.id, old.title, old.body);
    INSERT INTO articles_fts(rowid, title, body) VALUES (new.id, new.title, new.body);
END;
CREATE TABLE IF NOT EXISTS highlights (
    id INTEGER PRIMARY KEY,
    article_id INTEGER NOT NULL REFERENCES articles(id) ON DELETE CASCADE,
    quote TEXT NOT NULL,
    note TEXT,
    created_at TEXT NOT NULL,
    request_key TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS highlights_by_article ON highlights(article_id, id);
CREATE TABLE IF NOT EXISTS reading_now (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    article_id INTEGER REFERENCES articles(id) ON DELETE SET NULL,
    updated_at TEXT NOT NULL
);
"""


class ArticleNotFoundError(UsageError):
    """No article has the id asked for."""

    def __init__(self, article_id: int) -> None:
        super().__init__(f"no article {article_id} in the library")
        self.article_id = article_id


@dataclass(frozen=True, slots=True)
class Article:
    """One saved article."""

    id: int
    title: str
    body: str
    url: str | None
    author: str | None
    added_at: str


@dataclass(frozen=True, slots=True)
class ArticleHit:
    """An article that matches a search, with an excerpt around the first match."""

    id: int
    title: str
    url: str | None
    author: str | None
    snippet: str


@dataclass(frozen=True, slots=True)
class Highlight:
    """A passage of an article the user kept, with an optional note."""

    id: int
    article_id: int
    quote: str
    note: str | None
    created_at: str


def search_terms(query: str) -> list[str]:
    """The query's terms: split on white space and punctuation (Chinese included)."""
    terms: list[str] = []
    for term in _SEPARATORS.split(query):
        if term and term.casefold() not in {t.casefold() for t in terms}:
            terms.append(term)
    return terms[:MAX_TERMS]


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _snippet(text: str, terms: list[str]) -> str:
    folded = text.casefold()
    found = [i for i in (folded.find(t.casefold()) for t in terms) if i >= 0]
    at = min(found) if found else 0
    start, end = max(at - SNIPPET_CHARS, 0), min(at + SNIPPET_CHARS, len(text))
    excerpt = " ".join(text[start:end].split())
    return ("…" if start else "") + excerpt + ("…" if end < len(text) else "")


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ReaderLibrary:
    """The library file at ``path`` (created with its folder on first use)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """The connection, held by this thread, in a transaction; errors as ``StorageError``."""
        with self._lock:
            conn = self._conn or self._open()
            try:
                with conn:
                    yield conn
            except sqlite3.Error as exc:
                raise StorageError(f"reader library {self.path}: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        try:
            make_private_folder(self.path.parent, what="reader library folder")
            # Its mode is set here, not left to the umask; SQLite gives its WAL the same.
            with contextlib.suppress(FileExistsError):
                create_private_file(self.path)
            # One there already is refused (another user's) or made private (0644 before).
            for suffix in ("", "-wal", "-shm"):
                secure_private_file(
                    self.path.with_name(self.path.name + suffix), what="reader library file"
                )
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                # Every statement is IF NOT EXISTS: two processes creating it at once both win.
                conn.executescript(f"BEGIN;{_SCHEMA}PRAGMA user_version = {SCHEMA_VERSION};COMMIT;")
            elif version > SCHEMA_VERSION:
                conn.close()
                raise ConfigurationError(
                    f"reader library {self.path} has schema version {version}; this version "
                    f"of the reader knows up to {SCHEMA_VERSION}"
                )
        except sqlite3.OperationalError as exc:
            if "trigram" in str(exc):
                raise ConfigurationError(
                    f"the reader needs SQLite 3.34 or later (FTS5 trigram); this Python has "
                    f"{sqlite3.sqlite_version}"
                ) from exc
            raise StorageError(f"cannot open reader library {self.path}: {exc}") from exc
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open reader library {self.path}: {exc}") from exc
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the connection; the next call opens it again."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._db() as conn:
            return work(conn)

    def add_article(
        self, title: str, body: str, *, url: str | None = None, author: str | None = None
    ) -> Article:
        """Save an article; returns it with its id.

        Raises:
            UsageError: The title or the body is empty.
        """
        if not title.strip() or not body.strip():
            raise UsageError("an article needs a title and a body")
        with self._db() as conn:
            cursor = conn.execute(
                "INSERT INTO articles (title, body, url, author, added_at) VALUES (?, ?, ?, ?, ?)",
                (title.strip(), body, url, author, _now()),
            )
            article_id = int(cursor.lastrowid or 0)
        return self.get_article(article_id)

    def remove_article(self, article_id: int) -> bool:
        """Delete an article and its highlights; ``True`` when it existed."""
        with self._db() as conn:
            return conn.execute("DELETE FROM articles WHERE id = ?", (article_id,)).rowcount > 0

    def get_article(self, article_id: int) -> Article:
        """The article; ``ArticleNotFoundError`` when there is none."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT id, title, body, url, author, added_at FROM articles WHERE id = ?",
                (article_id,),
            ).fetchone()
        )
        if row is None:
            raise ArticleNotFoundError(article_id)
        return Article(*row)

    def articles_after(self, article_id: int, limit: int) -> list[Article]:
        """Up to ``limit`` articles with a larger id than ``article_id``, by id."""
        rows = self._read(
            lambda conn: conn.execute(
                "SELECT id, title, body, url, author, added_at FROM articles WHERE id > ? "
                "ORDER BY id LIMIT ?",
                (article_id, limit),
            ).fetchall()
        )
        return [Article(*row) for row in rows]

    def search(self, query: str, limit: int = 10) -> list[ArticleHit]:
        """Articles whose title or text holds every term of ``query``, best first.

        Raises:
            UsageError: The query has no terms (only spaces and punctuation).
        """
        terms = search_terms(query)
        if not terms:
            raise UsageError("the query has no words to search for")
        indexed = [t for t in terms if len(t) >= TRIGRAM]
        short = [t for t in terms if len(t) < TRIGRAM]
        likes = " AND ".join(
            "(a.title LIKE ? ESCAPE '\\' OR a.body LIKE ? ESCAPE '\\')" for _ in short
        )
        like_args = [pattern for t in short for pattern in (_like(t), _like(t))]
        if indexed:
            sql = (
                "SELECT a.id, a.title, a.url, a.author, a.body FROM articles_fts "
                "JOIN articles a ON a.id = articles_fts.rowid WHERE articles_fts MATCH ?"
                + (f" AND {likes}" if likes else "")
                + f" ORDER BY bm25(articles_fts, {TITLE_WEIGHT}, 1.0) LIMIT ?"
            )
            args: list[object] = [" AND ".join(_phrase(t) for t in indexed), *like_args, limit]
        else:
            # No index can help: title matches first, then the newest.
            sql = (
                f"SELECT a.id, a.title, a.url, a.author, a.body FROM articles a WHERE {likes} "
                "ORDER BY (a.title LIKE ? ESCAPE '\\') DESC, a.id DESC LIMIT ?"
            )
            args = [*like_args, _like(short[0]), limit]
        rows = self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [
            ArticleHit(
                id=row[0], title=row[1], url=row[2], author=row[3], snippet=_snippet(row[4], terms)
            )
            for row in rows
        ]

    def save_highlight(
        self,
        article_id: int,
        quote: str,
        *,
        note: str | None = None,
        request_key: str | None = None,
    ) -> tuple[Highlight, bool]:
        """Keep a passage of an article; returns the highlight and whether it is new.

        A second save with the same ``request_key`` (a retried request) returns the first
        one and saves nothing.

        Raises:
            ArticleNotFoundError: No such article.
            UsageError: ``quote`` is not a passage of the article (white space aside).
        """
        with self._db() as conn:
            if request_key is not None:
                row = conn.execute(
                    "SELECT id, article_id, quote, note, created_at FROM highlights "
                    "WHERE request_key = ?",
                    (request_key,),
                ).fetchone()
                if row is not None:
                    return Highlight(*row), False
            found = conn.execute(
                "SELECT title, body FROM articles WHERE id = ?", (article_id,)
            ).fetchone()
            if found is None:
                raise ArticleNotFoundError(article_id)
            if _folded(quote) not in _folded(found[1]) and _folded(quote) not in _folded(found[0]):
                raise UsageError(
                    f"the quote is not in article {article_id}: copy the passage exactly "
                    "from the article's text"
                )
            # A retry racing in another process loses on the unique key and reads the winner.
            cursor = conn.execute(
                "INSERT INTO highlights (article_id, quote, note, created_at, request_key) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (request_key) DO NOTHING",
                (article_id, quote.strip(), note, _now(), request_key),
            )
            created = cursor.rowcount > 0
            row = conn.execute(
                "SELECT id, article_id, quote, note, created_at FROM highlights WHERE "
                + ("id = ?" if created else "request_key = ?"),
                (cursor.lastrowid if created else request_key,),
            ).fetchone()
        return Highlight(*row), created

    def highlights(self, article_id: int | None = None, limit: int = 50) -> list[Highlight]:
        """Highlights of one article (or of all), oldest first.

        Raises:
            ArticleNotFoundError: ``article_id`` names no article.
        """
        if article_id is not None:
            self.get_article(article_id)
        where, args = ("WHERE article_id = ?", [article_id]) if article_id is not None else ("", [])
        rows = self._read(
            lambda conn: conn.execute(
                f"SELECT id, article_id, quote, note, created_at FROM highlights {where} "
                "ORDER BY id LIMIT ?",
                [*args, limit],
            ).fetchall()
        )
        return [Highlight(*row) for row in rows]

    def set_reading_now(self, article_id: int | None) -> None:
        """Record the article the user has open (``None``: none); tasks see it as context.

        Raises:
            ArticleNotFoundError: No such article.
        """
        if article_id is not None:
            self.get_article(article_id)
        with self._db() as conn:
            conn.execute(
                "INSERT INTO reading_now (only, article_id, updated_at) VALUES (1, ?, ?) "
                "ON CONFLICT (only) DO UPDATE SET article_id = excluded.article_id, "
                "updated_at = excluded.updated_at",
                (article_id, _now()),
            )

    def reading_now(self) -> Article | None:
        """The article the user has open, if the app recorded one."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT article_id FROM reading_now WHERE only = 1"
            ).fetchone()
        )
        if row is None or row[0] is None:
            return None
        return self.get_article(int(row[0]))
