"""Opening the kernel's SQLite database: driver choice, pragmas, sqlite-vec, thread offload.

Some Python builds (this project's own development machines among them) compile ``sqlite3``
without extension loading, so ``sqlite_vec`` cannot be loaded through it. There we use
``sqlean`` (the sqlean.py package), a maintained drop-in ``sqlite3`` module that ships its own
SQLite with extension loading enabled.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TypeVar, cast

import anyio.lowlevel
import anyio.to_thread
import sqlite_vec

from core_agent.contracts.errors import StorageError

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def sqlite_driver() -> ModuleType:
    """The DB-API module to use: stdlib ``sqlite3`` if it can load extensions, else sqlean."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    import sqlean

    return cast(ModuleType, sqlean)


def connect(path: Path | str) -> sqlite3.Connection:
    """Open (creating if needed) a database in WAL mode with sqlite-vec loaded.

    Raises:
        StorageError: The file cannot be opened or the extension cannot be loaded.
    """
    driver = sqlite_driver()
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        # Autocommit (isolation_level=None): transactions are explicit, see ``transaction``.
        conn = cast(
            sqlite3.Connection,
            driver.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0),
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: durable across a process crash; only a power loss can lose the
        # last commits, in exchange for no fsync per commit.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            conn.enable_load_extension(False)
    except driver.Error as exc:
        raise StorageError(f"cannot open database {path}: {exc}") from exc
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SqliteDatabase:
    """One connection, used by one thread at a time, off the event loop.

    Driver errors become ``StorageError``; kernel errors raised inside a call pass through.
    """

    def __init__(self, path: Path | str) -> None:
        from providers.sqlite.migrations import migrate

        self.path = path
        self._driver_errors: tuple[type[BaseException], ...] = (
            sqlite_driver().Error,
            sqlite3.Error,
        )
        self._conn = connect(path)
        self._lock = threading.Lock()
        self._closed = False
        self.call(migrate)

    @property
    def driver_name(self) -> str:
        """``sqlite3`` or ``sqlean``: which module this database runs on."""
        return type(self._conn).__module__.split(".")[0]

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in the calling thread, holding the connection's lock."""
        with self._lock:
            if self._closed:
                raise StorageError(f"database {self.path} is closed")
            try:
                return fn(self._conn)
            except self._driver_errors as exc:
                raise StorageError(f"database {self.path}: {exc}") from exc

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` without blocking the event loop on a lock.

        The kernel's statements take microseconds, while a hop to a worker thread costs
        about a hundred; so ``fn`` first runs inline, with SQLite told not to wait for locks.
        If the connection is busy in another thread or the database is locked by another
        writer, it runs in a worker thread with the full busy timeout instead. A locked
        database is reported before anything is written (``BEGIN IMMEDIATE`` or the single
        statement fails first), so the retry cannot apply a change twice.
        """
        if self._lock.acquire(blocking=False):
            try:
                if self._closed:
                    raise StorageError(f"database {self.path} is closed")
                self._conn.execute("PRAGMA busy_timeout=0")
                try:
                    result = fn(self._conn)
                except self._driver_errors as exc:
                    if not _is_busy(exc):
                        raise StorageError(f"database {self.path}: {exc}") from exc
                else:
                    await anyio.lowlevel.checkpoint()
                    return result
                finally:
                    self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            finally:
                self._lock.release()
        return await anyio.to_thread.run_sync(self.call, fn)

    async def close(self) -> None:
        """Close the connection; later calls raise ``StorageError``."""

        def close() -> None:
            with self._lock:
                if not self._closed:
                    self._conn.close()
                    self._closed = True

        await anyio.to_thread.run_sync(close)
