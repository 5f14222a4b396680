"""Opening the kernel's SQLite database: driver choice, pragmas, sqlite-vec, thread offload.

Some Python builds (this project's own development machines among them) compile ``sqlite3``
without extension loading, so ``sqlite_vec`` cannot be loaded through it. There we use
``sqlean`` (the sqlean.py package), a maintained drop-in ``sqlite3`` module that ships its own
SQLite with extension loading enabled.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import queue
import sqlite3
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, TypeVar, cast

import anyio.lowlevel
import anyio.to_thread

from core_agent.contracts.errors import ConfigurationError, LeaseLostError, StorageError
from core_agent.contracts.private_files import (
    create_private_file,
    make_private_folder,
    secure_private_file,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
READER_MMAP_BYTES = 1 << 30
READER_CACHE_KIB = 65_536
WAL_PROBE_EVERY_CALLS = 16
"""Look at what the WAL holds this often: a call may write one page or hundreds (a task's
calls wrote 20 KiB each on average, so the WAL overshoots its bound by about 0.3 MiB; a look
costs about 6 µs)."""
CHECKPOINT_WAL_BYTES = 8 << 20
"""Run a WAL checkpoint in the background once this much in the WAL is not yet copied.

Each checkpoint fsyncs twice, which slows the commits made meanwhile; what is not yet copied
costs readers little while it fits one block of the WAL index (4,096 frames, 16 MiB)."""
WAL_SIZE_LIMIT_BYTES = 32 << 20
"""The WAL file's bound. Once a checkpoint finds the WAL within ``CHECKPOINT_WAL_BYTES`` of
it, the WAL is made to start over (the one step that makes the event loop's calls wait); a
WAL that reaches it anyway (a background checkpoint slowed by a busy machine) is made to
start over at the next probe; a file larger than this is cut back to it when the WAL starts
over."""
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_WAL_FRAME_HEADER_BYTES = 24
_WAL_INDEX_MAX_FRAME_AT, _WAL_INDEX_BACKFILL_AT = 16, 96
_FORCED_RESTART_WAIT_S = 2.0


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


@functools.cache
def sqlite_vec_path() -> str:
    """The sqlite-vec extension's file (without its suffix, as ``load_extension`` takes it).

    Found where the ``sqlite_vec`` package lies rather than by importing it: its
    ``__init__`` imports NumPy for helpers the kernel does not use, which was a tenth to a
    quarter of a second of every command's start. A layout this does not recognise falls
    back to the package's own ``loadable_path``.
    """
    spec = importlib.util.find_spec("sqlite_vec")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(folder) / "vec0"
        if any(candidate.with_suffix(suffix).is_file() for suffix in (".so", ".dylib", ".dll")):
            return str(candidate)
    import sqlite_vec

    return str(sqlite_vec.loadable_path())


def sqlite_driver() -> ModuleType:
    """The DB-API module to use: stdlib ``sqlite3`` if it can load extensions, else sqlean."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    import sqlean

    return cast(ModuleType, sqlean)


def _adapt_none(value: None) -> None:
    return value


def _bind_none_quickly(driver: ModuleType) -> None:
    """Register ``None`` as adapting to itself (still stored as NULL).

    The driver binds ``str``, ``int``, ``float`` and ``bytes`` directly but looks ``None`` up
    as a type to adapt, missing its table and then probing the value for ``__conform__``:
    about a microsecond per parameter, and every step binds a dozen of them (the ledger's
    unfinished columns, spans' empty tokens and costs). A registered adapter is found at
    once. Registering the same function again is harmless.
    """
    driver.register_adapter(type(None), _adapt_none)


# The files SQLite keeps beside a database in WAL mode, with the database's mode.
_COMPANIONS = ("-wal", "-shm")


def connect(path: Path | str) -> sqlite3.Connection:
    """Open (creating if needed) a database in WAL mode with sqlite-vec loaded.

    Raises:
        StorageError: The file cannot be opened or the extension cannot be loaded.
        ConfigurationError: Its folder does not exist and cannot be created, or it, the
            database or its -wal/-shm is another user's or writable by others
            (``contracts.private_files``).
    """
    driver = sqlite_driver()
    _bind_none_quickly(driver)
    if str(path) != ":memory:":
        database = Path(path)
        folder = database.parent
        try:
            make_private_folder(folder, what="data directory")
        except OSError as exc:
            # The folder is the user's setting (AGENT_DATA_DIR): theirs to fix, so say which.
            raise ConfigurationError(
                f"cannot create the data directory {folder} (AGENT_DATA_DIR): {exc.strerror or exc}"
            ) from exc
        # Made here rather than by SQLite, which would give it the umask's mode (often
        # world-readable); SQLite gives the -wal and -shm files the database file's mode.
        try:
            create_private_file(database)
        except FileExistsError:
            pass  # judged below with its companions
        except OSError as exc:
            raise StorageError(f"cannot create database {path}: {exc}") from exc
        # One there already (another user's, an earlier version's 0644, a -wal left by a
        # crash) is refused or made private before SQLite opens and writes through it.
        for file in (database, *(database.with_name(database.name + s) for s in _COMPANIONS)):
            try:
                secure_private_file(file, what="database file")
            except OSError as exc:
                raise StorageError(f"cannot open database {path}: {exc}") from exc
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
        # No waiting on the inline path (see ``run``); the thread path waits.
        conn.execute("PRAGMA busy_timeout=0")
        # A checkpoint fsyncs the database file (milliseconds); SqliteDatabase runs them in a
        # background thread instead of inside whichever commit crosses the threshold.
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        conn.enable_load_extension(True)
        try:
            conn.load_extension(sqlite_vec_path())
        finally:
            conn.enable_load_extension(False)
    except driver.Error as exc:
        raise StorageError(f"cannot open database {path}: {exc}") from exc
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception.

    Inside a transaction already open (a unit of work committing several stores' writes),
    it joins that one: the outer transaction commits or rolls back for both.
    """
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # Also when COMMIT itself failed (disk full, I/O error) and left the transaction
        # open: later calls would join it and never commit.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class _Unit:
    """Writes held back until the unit of work that collects them commits."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database
        self.writes: list[Callable[[sqlite3.Connection], None]] = []
        self.after_commit: list[Callable[[], Awaitable[None]]] = []
        self.closed = False
        """Set once its block ends. Work that outlives the block and still sees the unit in
        its context (a worker thread's late report, a task started from inside) writes
        directly: appended here, its write would never be committed."""
        self.owners: list[int] | None = None
        """In a unit held apart: for each ``after_commit`` callback, the index of the write
        queued just before it (an event's publication follows its insert; -1 for none), so
        the caller can leave out the callbacks of a write it skipped."""


def _open_unit(database: SqliteDatabase) -> _Unit | None:
    """The unit of work open on ``database`` in this context, if any."""
    unit = _UNIT.get()
    if unit is None or unit.database is not database or unit.closed:
        return None
    return unit


class _Group:
    """Transactions asked for on one event loop at about the same time, committed together."""

    def __init__(self) -> None:
        self.calls: list[Callable[[sqlite3.Connection], Any]] = []
        self.results: list[Any] = []
        self.errors: list[BaseException | None] = []
        self.applied = False
        self.done: anyio.Event | None = None
        """Made by the first caller that has to wait: a group of one (the usual case with a
        single task) never needs it."""


class _LoopState:
    """What a ``SqliteDatabase`` keeps per event loop (see ``SqliteDatabase.run``)."""

    def __init__(self) -> None:
        self.gate = anyio.Lock()
        self.group: _Group | None = None


def _shared_error(exc: Exception) -> Exception:
    """An error of the group's commit for one of its callers (an exception is raised once)."""
    if type(exc) is StorageError:
        copy = StorageError(str(exc))
        copy.__cause__ = exc
        return copy
    return exc


_UNIT: ContextVar[_Unit | None] = ContextVar("core_agent_sqlite_unit", default=None)
_HIDDEN: ContextVar[_Unit | None] = ContextVar("core_agent_sqlite_hidden_unit", default=None)
"""The unit of work the innermost ``independent_work`` of this context hid (``hand_over``)."""
_FENCE: ContextVar[tuple[SqliteDatabase, Callable[[sqlite3.Connection], None]] | None] = ContextVar(
    "core_agent_sqlite_fence", default=None
)
"""The fence of the block this context runs in, with the database it guards: the task's
row is in that file, and writes to any other (a host's own store) are not its."""


def _settle(group: _Group, results: list[Any], errors: list[BaseException | None]) -> None:
    """Hand ``group``'s outcome to its callers and wake those waiting for it."""
    group.results, group.errors = results, errors
    group.applied = True
    if group.done is not None:
        group.done.set()


def _behind(
    fence: Callable[[sqlite3.Connection], None], fn: Callable[[sqlite3.Connection], T]
) -> Callable[[sqlite3.Connection], T]:
    """``fn``, after ``fence`` (which raises to keep it from being applied)."""

    def fenced(conn: sqlite3.Connection) -> T:
        fence(conn)
        return fn(conn)

    return fenced


class _HandedOver:
    """A unit's writes handed to another one (``SqliteDatabase.hand_over``), with their fence.

    Applied as one write of that unit: the fence first, and on a lost lease none of them
    (nor their callbacks), while the rest of the transaction commits. If one of them fails
    (other than on a busy database), the transaction fails with its error, once: they are
    left out of every later try, so the unit's next commit (a run's ending that records
    the failure) is not refused by them again.
    """

    def __init__(
        self,
        writes: list[Callable[[sqlite3.Connection], None]],
        fence: Callable[[sqlite3.Connection], None] | None,
    ) -> None:
        self._writes = writes
        self._fence = fence
        self._left_out = False
        self._failed = False

    def apply(self, conn: sqlite3.Connection) -> None:
        if self._failed:
            return
        self._left_out = False  # a retried transaction checks again
        if self._fence is not None:
            try:
                self._fence(conn)
            except LeaseLostError:
                # Another kernel runs the task now: what this one recorded of it is void.
                self._left_out = True
                return
        try:
            for write in self._writes:
                write(conn)
        except Exception as exc:
            if not _is_busy(exc):  # busy: tried again whole, from its BEGIN
                self._failed = self._left_out = True
            raise

    def after(self, callback: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """``callback``, run only if the writes were applied."""

        async def run() -> None:
            if not self._left_out:
                await callback()

        return run


def _nothing(conn: sqlite3.Connection) -> None:
    """A write that writes nothing (``flush`` commits only what is held)."""


class ReaderPool:
    """Read connections for searches that run in worker threads, one thread per connection.

    Long reads (a vector scan, a full-text ranking) run here rather than on
    ``SqliteDatabase``'s connection: they would block the event loop inline, and several can
    run at once in WAL mode.
    """

    def __init__(self, path: Path | str) -> None:
        self._path = path
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []

    def run(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """All rows of ``sql``, on an idle connection (a new one when none is idle)."""
        return self.call(lambda conn: list(conn.execute(sql, params).fetchall()))

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on an idle connection (a new one when none is idle)."""
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = connect(self._path)
            conn.execute("PRAGMA busy_timeout=30000")
            # A vector search reads every vector: map the file instead of copying pages
            # through a small cache (about a fifth of the latency at 100k vectors).
            conn.execute(f"PRAGMA mmap_size={READER_MMAP_BYTES}")
            conn.execute(f"PRAGMA cache_size=-{READER_CACHE_KIB}")
            self._all.append(conn)
        try:
            return fn(conn)
        finally:
            self._idle.put(conn)

    def close(self) -> None:
        """Close every connection (call when no search is running)."""
        for conn in self._all:
            conn.close()
        self._all.clear()


class SqliteDatabase:
    """One connection, used by one thread at a time, mostly on the event loop (see ``run``).

    Driver errors become ``StorageError``; kernel errors raised inside a call pass through.
    Stores get theirs from ``open``: one handle per file in a process, so what several stores
    write for one step can commit as one transaction, and one connection checkpoints the WAL.
    """

    _shared: ClassVar[dict[str, tuple[SqliteDatabase, int]]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def open(cls, path: Path | str) -> SqliteDatabase:
        """The process's handle on ``path`` (opened on first use); ``close`` releases it.

        Raises:
            StorageError: The file cannot be opened or migrated.
            DataTooNewError: A newer core-agent wrote the file (see ``migrate``).
        """
        key = str(path) if str(path) == ":memory:" else str(Path(path).resolve())
        with cls._shared_lock:
            found = cls._shared.get(key)
            if found is not None and not found[0]._closed:
                cls._shared[key] = (found[0], found[1] + 1)
                return found[0]
            database = cls(path)
            database._shared_key = key
            cls._shared[key] = (database, 1)
            return database

    def __init__(self, path: Path | str) -> None:
        from providers.sqlite.migrations import migrate

        self.path = path
        self._shared_key: str | None = None
        self._driver_errors: tuple[type[BaseException], ...] = (
            sqlite_driver().Error,
            sqlite3.Error,
        )
        self._conn = connect(path)
        # The savepoints of a group of transactions (``transact``) journal every page they
        # change; past 64 KiB in one savepoint SQLite moves that journal to a temporary file
        # for the rest of the transaction, and every page then costs a write system call
        # (a sixth of the database's time with 1,000 tasks in flight). In memory, a page
        # costs a copy. Only this connection: the readers' large sorts may still spill.
        self._conn.execute("PRAGMA temp_store=MEMORY")
        self._lock = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[object, _LoopState] = weakref.WeakKeyDictionary()
        self._closed = False
        self._calls_since_checkpoint = 0
        self._restart_due = False
        self._restart_forced = False
        self._checkpoint_lock = threading.Lock()
        try:
            self.call(migrate)
        except BaseException:
            # Refused (a newer schema) or failed: no handle is returned to close it.
            self._closed = True
            self._conn.close()
            raise
        self._frame_bytes: int = (
            self.call(lambda conn: conn.execute("PRAGMA page_size").fetchone()[0])
            + _WAL_FRAME_HEADER_BYTES
        )

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in the calling thread, holding the connection's lock.

        SQLite waits up to ``BUSY_TIMEOUT_MS`` here for another writer to finish.
        """
        with self._lock:
            if self._closed:
                raise StorageError(f"database {self.path} is closed")
            try:
                self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                try:
                    return fn(self._conn)
                finally:
                    self._conn.execute("PRAGMA busy_timeout=0")
            except self._driver_errors as exc:
                raise StorageError(f"database {self.path}: {exc}") from exc

    async def write(self, fn: Callable[[sqlite3.Connection], None]) -> None:
        """Apply ``fn`` in a transaction: now, or with the unit of work open on this database.

        Only writes whose effects nobody reads back before the unit ends may be deferred
        (events, spans, checkpoints, messages, a tool call's result); status moves use
        ``run`` and a tool call's intent ``commit_with``.
        """
        unit = _open_unit(self)
        if unit is not None:
            unit.writes.append(fn)
            return

        await self.transact(fn)

    async def transact(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Apply ``fn`` in a transaction, durable when this returns; its result or error.

        Like ``run`` with ``fn`` inside ``transaction``, except that the transactions that
        the event loop's tasks ask for at about the same time (before the first of them
        gets the loop back) commit together: each in a savepoint of its own, so one that
        raises is rolled back alone and only its caller sees the error. A commit costs
        tens of microseconds, the statements of a step a few: with many tasks in flight
        the commits were most of the database's time.
        """
        fence = _FENCE.get()
        if fence is not None and fence[0] is self:
            fn = _behind(fence[1], fn)
        state = self._loop_state()
        group = state.group
        leader = group is None
        if group is None:
            group = state.group = _Group()
        slot = len(group.calls)
        group.calls.append(fn)
        # Whatever happens to the caller, the write is in the group and will be applied:
        # wait for it, so the caller knows how it ended.
        with anyio.CancelScope(shield=True):
            if leader:
                try:
                    await anyio.lowlevel.checkpoint()  # the tasks ready now add theirs
                except BaseException:
                    # A cancel no shield stops (asyncio's own, as Ctrl-C sends): the group is
                    # applied here and now, or every write after it would join it and wait
                    # for ever.
                    if state.group is group:
                        state.group = None
                    self._apply_group_at_once(group)
                    raise
                state.group = None
                await self._apply_group(group, state)
            elif not group.applied:
                if group.done is None:
                    group.done = anyio.Event()
                await group.done.wait()
        await anyio.lowlevel.checkpoint_if_cancelled()
        error = group.errors[slot]
        if error is not None:
            raise error
        return cast(T, group.results[slot])

    async def _apply_group(self, group: _Group, state: _LoopState) -> None:
        with self._settling(group) as (results, errors):
            # The leader yielded before this (to gather the group): no second yield after.
            apply = self._group_transaction(group.calls, results, errors)
            await self._run(apply, state, yield_after=False)

    def _apply_group_at_once(self, group: _Group) -> None:
        """Apply ``group`` in this thread, waiting for the connection (see ``transact``)."""
        with self._settling(group) as (results, errors):
            self.call(self._group_transaction(group.calls, results, errors))

    @contextmanager
    def _settling(self, group: _Group) -> Iterator[tuple[list[Any], list[BaseException | None]]]:
        """The lists a group's application fills; handed to its callers however it ends."""
        results: list[Any] = [None] * len(group.calls)
        errors: list[BaseException | None] = [None] * len(group.calls)
        try:
            yield results, errors
        except Exception as exc:
            # Nothing was committed: every caller hears why, each through its own error.
            errors[:] = [exc] if len(errors) == 1 else [_shared_error(exc) for _ in errors]
        except BaseException as exc:
            interrupted = StorageError(f"database {self.path}: {exc!r}")
            errors[:] = [_shared_error(interrupted) for _ in errors]
            raise
        finally:
            _settle(group, results, errors)

    def _group_transaction(
        self,
        calls: list[Callable[[sqlite3.Connection], Any]],
        results: list[Any],
        errors: list[BaseException | None],
    ) -> Callable[[sqlite3.Connection], None]:
        """One transaction applying ``calls``, each in a savepoint of its own."""

        def apply(conn: sqlite3.Connection) -> None:
            # A retry (the database was locked) starts again from nothing: ``BEGIN
            # IMMEDIATE`` failed before any call ran.
            errors[:] = [None] * len(calls)
            with transaction(conn):
                if len(calls) == 1:
                    results[0] = calls[0](conn)
                    return
                for index, fn in enumerate(calls):
                    conn.execute("SAVEPOINT grouped")
                    try:
                        results[index] = fn(conn)
                    except Exception as exc:
                        conn.execute("ROLLBACK TO grouped")
                        errors[index] = (
                            StorageError(f"database {self.path}: {exc}")
                            if isinstance(exc, self._driver_errors)
                            else exc
                        )
                    conn.execute("RELEASE grouped")

        return apply

    def after_commit(self, callback: Callable[[], Awaitable[None]]) -> bool:
        """Queue ``callback`` for after the open unit of work commits.

        Returns ``False`` when no unit is open on this database (the caller runs it now).
        """
        unit = _open_unit(self)
        if unit is None:
            return False
        unit.after_commit.append(callback)
        if unit.owners is not None:
            unit.owners.append(len(unit.writes) - 1)
        return True

    @contextmanager
    def fenced(self, check: Callable[[sqlite3.Connection], None]) -> Iterator[None]:
        """Run ``check`` first in every transaction the block commits (``ITaskStore.fenced``).

        A check that raises rolls back that transaction alone (the others of its group
        commit) and its caller gets the error; the writes a unit of work held for it are not
        applied either.
        """
        token = _FENCE.set((self, check))
        try:
            yield
        finally:
            _FENCE.reset(token)

    @contextmanager
    def independent_work(self) -> Iterator[None]:
        """Hide the unit of work open in this context from the block: its writes go on their own.

        See ``ITaskStore.independent_work`` (a nested task run inside a caller's step).
        """
        hidden = _HIDDEN.set(_open_unit(self))
        token = _UNIT.set(None)
        try:
            yield
        finally:
            _UNIT.reset(token)
            _HIDDEN.reset(hidden)

    def hand_over(self) -> bool:
        """Move what the open unit holds to the one ``independent_work`` hid (see the port).

        They move as one write behind the fence in force here, and their ``after_commit``
        callbacks with them, run only if that write was applied.
        """
        unit, hidden = _open_unit(self), _HIDDEN.get()
        if unit is None or hidden is None or hidden.database is not self or hidden.closed:
            return False
        if unit.owners is not None:  # held apart: its caller applies it, and knows its writes
            return False
        if not unit.writes and not unit.after_commit:
            return True
        fence = _FENCE.get()
        handed = _HandedOver(unit.writes, fence[1] if fence and fence[0] is self else None)
        callbacks, unit.writes, unit.after_commit = unit.after_commit, [], []
        hidden.writes.append(handed.apply)
        for callback in callbacks:
            hidden.after_commit.append(handed.after(callback))
            if hidden.owners is not None:
                hidden.owners.append(len(hidden.writes) - 1)
        return True

    @contextmanager
    def held_apart(self) -> Iterator[_Unit]:
        """Hold the block's writes and ``after_commit`` callbacks in a unit of their own.

        Nothing commits that unit: the caller applies its ``writes`` in a transaction of its
        own and runs its ``after_commit`` callbacks once that is durable, but not those of a
        write it skipped (``_Unit.owners``; a status move and what follows from it,
        ``SqliteTaskStore.transition``).
        """
        unit = _Unit(self)
        unit.owners = []
        token = _UNIT.set(unit)
        try:
            yield unit
        finally:
            _UNIT.reset(token)
            unit.closed = True

    async def flush(self) -> None:
        """Commit what the unit of work open on this database holds so far; it stays open.

        Its ``after_commit`` callbacks so far run once the writes are durable. Outside a
        unit there is nothing held back, and nothing to do.
        """
        unit = _open_unit(self)
        if unit is None or not (unit.writes or unit.after_commit):
            return
        await self.commit_with(_nothing)

    async def commit_with(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Apply ``fn`` now, in one transaction with what the open unit of work holds.

        For a write that must be durable before the caller goes on (a tool call's intent,
        before the tool acts): the step's records so far commit with it, so the step costs
        one commit there instead of two. The unit stays open; outside one this is
        ``transact``. The held writes are applied even if the caller is cancelled meanwhile.
        """
        unit = _open_unit(self)
        if unit is None:
            return await self.transact(fn)
        writes, unit.writes = unit.writes, []
        callbacks, unit.after_commit = unit.after_commit, []

        def apply(conn: sqlite3.Connection) -> T:
            for held in writes:
                held(conn)
            return fn(conn)

        if fn is _nothing and not writes:
            result = cast(T, None)
        else:
            try:
                with anyio.CancelScope(shield=True):
                    result = await self.transact(apply)
            except BaseException:
                # Nothing was written: the held writes wait for the unit's end (or the next
                # flush) instead of being lost with this one.
                unit.writes[:0] = writes
                unit.after_commit[:0] = callbacks
                raise
        for callback in callbacks:
            await callback()
        return result

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """Hold back ``write`` calls made inside, then apply them all in one transaction.

        A unit opened inside another one on the same database joins it. The writes are
        applied when the block ends, also when it raises or is cancelled (what was recorded
        happened); ``after_commit`` callbacks run once they are durable, also then.
        """
        if _open_unit(self) is not None:
            yield
            return
        unit = _Unit(self)
        token = _UNIT.set(unit)
        completed = False
        try:
            yield
            completed = True
        finally:
            _UNIT.reset(token)
            unit.closed = True
            with anyio.CancelScope(shield=True):
                await self._commit(unit)
                # Also when the block raised (a step that stops to wait for a human, a cancel):
                # what was committed happened, and whoever watches must hear of it.
                for callback in unit.after_commit:
                    try:
                        await callback()
                    except Exception:
                        if completed:
                            raise
                        # The block's own error is the one to propagate.
                        log.exception("a callback after a unit of work failed")

    @asynccontextmanager
    async def all_or_nothing(self) -> AsyncIterator[None]:
        """Hold back ``write`` calls made inside; apply them in one transaction if it completes.

        When the block raises (or is cancelled), its writes are dropped and its
        ``after_commit`` callbacks never run: nothing of it happened. Inside an open unit of
        work, the writes of a block that completed join that unit.
        """
        with self.held_apart() as unit:
            yield
        outer = _open_unit(self)
        if outer is not None:
            offset = len(outer.writes)  # ``owners`` index the writes: they move up by this
            outer.writes.extend(unit.writes)
            for owner, callback in zip(unit.owners or [], unit.after_commit, strict=True):
                outer.after_commit.append(callback)
                if outer.owners is not None:
                    outer.owners.append(owner + offset)
            return
        if unit.writes:
            with anyio.CancelScope(shield=True):
                await self._commit(unit)
        for callback in unit.after_commit:
            await callback()

    async def _commit(self, unit: _Unit) -> None:
        if not unit.writes:
            return

        def apply(conn: sqlite3.Connection) -> None:
            for fn in unit.writes:
                fn(conn)

        await self.transact(apply)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` without blocking the event loop on a lock.

        The kernel's statements take microseconds, while a hop to a worker thread costs
        about a hundred; so ``fn`` runs inline, with SQLite told not to wait for locks.
        Only when the database is locked by another connection (another process, the
        background checkpoint) or this connection is in use in another thread does a call
        wait, in a worker thread with the full busy timeout; and then one call at a time per
        event loop: the others queue on the loop, first come first served, and run inline
        once it is done. A locked database is reported before anything is written
        (``BEGIN IMMEDIATE`` or the single statement fails first), so the retry cannot apply
        a change twice.
        """
        return await self._run(fn, self._loop_state(), yield_after=True)

    async def _run(
        self, fn: Callable[[sqlite3.Connection], T], state: _LoopState, *, yield_after: bool
    ) -> T:
        """``run``; without ``yield_after``, a call that ran inline returns without yielding."""
        gate = state.gate
        if self._restart_due:
            await self._restart_wal(gate)
        if not gate.locked():
            done, result = self._run_inline(fn)
            if done:
                # Yield only after letting go: a task that ran while we held the connection
                # across the yield would find it in use and have to queue.
                if yield_after:
                    await anyio.lowlevel.checkpoint()
                return result
        async with gate:
            done, result = self._run_inline(fn)
            if not done:
                result = await anyio.to_thread.run_sync(self.call, fn)
                self._count_call()
        return result

    def _run_inline(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[bool, T]:
        """``(True, fn(connection))``, or ``(False, ...)`` when it would have to wait."""
        if not self._lock.acquire(blocking=False):
            return False, cast(T, None)
        try:
            if self._closed:
                raise StorageError(f"database {self.path} is closed")
            try:
                result = fn(self._conn)  # busy_timeout is 0 between calls
            except self._driver_errors as exc:
                if not _is_busy(exc):
                    raise StorageError(f"database {self.path}: {exc}") from exc
                return False, cast(T, None)
        finally:
            self._lock.release()
        self._count_call()
        return True, result

    def _loop_state(self) -> _LoopState:
        """This handle's queue and open group of transactions on the current event loop.

        Both belong to one event loop; a handle shared by a process can serve several (a
        synchronous facade's loop thread, successive ``anyio.run`` calls).
        """
        loop = anyio.lowlevel.current_token().native_token
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopState()
        return state

    async def _restart_wal(self, gate: anyio.Lock) -> None:
        """Make the WAL start over from its beginning, after a checkpoint copied most of it.

        RESTART copies what was written since that checkpoint, fsyncs, and has the next write
        go to the start of the file. The file keeps its size (up to ``journal_size_limit``):
        writing over blocks already allocated costs a commit less than growing a file does
        (about a tenth of a step's CPU, measured against truncating it to nothing). It holds
        the write lock while it runs: done on this connection in a worker thread while this
        loop's other calls queue, rather than on another connection whose lock would send
        them to worker threads. It does not wait for readers: busy, it is left to the next
        checkpoint.

        Forced (the WAL reached ``WAL_SIZE_LIMIT_BYTES`` before a checkpoint asked for it),
        it first waits for a background checkpoint still running (on a busy machine that
        checkpoint is what let the WAL run past its bound), then copies whatever is left: the
        loop's calls wait longer, but the file stays within its bound.
        """
        async with gate:
            if not self._restart_due:
                return
            forced = self._restart_forced
            self._restart_due = self._restart_forced = False

            def restart() -> None:
                if forced and not self._checkpoint_lock.acquire(timeout=_FORCED_RESTART_WAIT_S):
                    return  # a checkpoint stuck behind a reader: the next probe tries again
                try:
                    with self._lock:
                        if self._closed:
                            return
                        try:
                            self._conn.execute("PRAGMA wal_checkpoint(RESTART)")
                        except self._driver_errors:
                            log.warning("WAL restart of %s failed", self.path, exc_info=True)
                finally:
                    if forced:
                        # The checkpoint waited for may have asked for the restart just done.
                        self._restart_due = False
                        self._checkpoint_lock.release()

            await anyio.to_thread.run_sync(restart)

    def _count_call(self) -> None:
        self._calls_since_checkpoint += 1
        if self._calls_since_checkpoint % WAL_PROBE_EVERY_CALLS:
            return
        frames, copied = self._wal_frames()
        if (frames - copied) * self._frame_bytes >= CHECKPOINT_WAL_BYTES:
            self.checkpoint_soon()
        if frames * self._frame_bytes >= WAL_SIZE_LIMIT_BYTES and not self._restart_due:
            self._restart_forced = self._restart_due = True

    def _wal_frames(self) -> tuple[int, int]:
        """How many frames the WAL holds, and how many of them a checkpoint has copied.

        Read from the WAL index (the ``-shm`` file, whose header SQLite documents: the last
        committed frame at byte 16, the last copied one at 96, native byte order) rather than
        from the WAL's size, which stays as it was when the WAL starts over. A read racing a
        commit can be a frame or two behind, which does not matter here. ``(0, 0)`` for a
        database without one (in memory).
        """
        try:
            with open(f"{self.path}-shm", "rb", buffering=0) as index:
                header = index.read(_WAL_INDEX_BACKFILL_AT + 4)
        except OSError:
            return 0, 0
        if len(header) < _WAL_INDEX_BACKFILL_AT + 4:
            return 0, 0
        at, copied_at = _WAL_INDEX_MAX_FRAME_AT, _WAL_INDEX_BACKFILL_AT
        frames = int.from_bytes(header[at : at + 4], sys.byteorder)
        copied = int.from_bytes(header[copied_at : copied_at + 4], sys.byteorder)
        return frames, min(copied, frames)

    def checkpoint_soon(self) -> None:
        """Start a background WAL checkpoint unless one is running.

        Writers of bulk data call this: readers of a database whose recent pages are all in a
        large WAL pay for a WAL lookup on every page (a full vector scan took twice as long).
        """
        if self._checkpoint_lock.acquire(blocking=False):
            self._calls_since_checkpoint = 0
            threading.Thread(target=self._checkpoint, name="wal-checkpoint", daemon=True).start()

    def _checkpoint(self) -> None:
        """Copy committed WAL frames into the database file, off the event loop.

        PASSIVE never waits and never holds up a writer. Once it has copied every frame, the
        next write starts the WAL over from its beginning (SQLite does so by itself), which
        happens when the kernel pauses; a writer that never pauses keeps appending, because
        the frames committed while a checkpoint runs (it fsyncs twice) are never all copied.
        So once the WAL nears ``WAL_SIZE_LIMIT_BYTES`` and this checkpoint copied all it saw,
        the next call on an event loop makes it start over (``_restart_wal``), copying only
        what came meanwhile. That is the only part the loop's calls wait for
        (milliseconds: it fsyncs too); done after every checkpoint, it was in one step out of
        twenty. Copied frames cost readers nothing (a reader looks only at the frames written
        after the last checkpoint), so a WAL kept up to that size reads as fast as an empty
        one. Runs on its own short-lived connection, holding ``_checkpoint_lock``.
        """
        try:
            conn = sqlite_driver().connect(str(self.path), isolation_level=None, timeout=1.0)
            try:
                busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                conn.close()
            # Started over now, the WAL stays within the limit until the next checkpoint. Not
            # when a reader's snapshot kept this one from copying it all: the restart would
            # copy the rest while the loop's calls wait (90 ms for 20k frames, measured); a
            # later checkpoint copies it off the loop once the reader is gone.
            nearly_full = frames * self._frame_bytes >= WAL_SIZE_LIMIT_BYTES - CHECKPOINT_WAL_BYTES
            if nearly_full and not busy and copied >= frames:
                self._restart_due = True
        except self._driver_errors:
            log.warning(
                "WAL checkpoint of %s failed; the next one will retry", self.path, exc_info=True
            )
        finally:
            self._checkpoint_lock.release()

    async def close(self) -> None:
        """Release this handle; the last release closes the connection.

        Later calls on a closed handle raise ``StorageError``.
        """
        if self._shared_key is not None:
            with self._shared_lock:
                found = self._shared.get(self._shared_key)
                if found is not None and found[0] is self:
                    if found[1] > 1:
                        self._shared[self._shared_key] = (self, found[1] - 1)
                        return
                    del self._shared[self._shared_key]

        def close() -> None:
            with self._checkpoint_lock, self._lock:
                if not self._closed:
                    # Fold the WAL back into the database file so it is self-contained.
                    try:
                        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    except self._driver_errors:
                        log.warning("final WAL checkpoint of %s failed", self.path, exc_info=True)
                    self._conn.close()
                    self._closed = True

        await anyio.to_thread.run_sync(close)
