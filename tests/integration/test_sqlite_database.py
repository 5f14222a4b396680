"""How ``SqliteDatabase.run`` shares its one connection among the tasks of an event loop."""

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from core_agent.contracts.errors import LeaseLostError, StorageError
from providers.sqlite.database import SqliteDatabase, connect, transaction

pytestmark = pytest.mark.anyio


def _database(tmp_path: Path) -> SqliteDatabase:
    db = SqliteDatabase(tmp_path / "k.db")
    db.call(lambda conn: conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)"))
    return db


def _insert(n: int, threads: list[int]):  # type: ignore[no-untyped-def]
    def write(conn: sqlite3.Connection) -> None:
        threads.append(threading.get_ident())
        with transaction(conn):
            conn.execute("INSERT INTO t (n) VALUES (?)", (n,))

    return write


def _rows(db: SqliteDatabase) -> list[int]:
    return [n for (n,) in db.call(lambda conn: conn.execute("SELECT n FROM t ORDER BY n"))]


async def test_many_writers_on_one_loop_all_run_on_the_loop(tmp_path: Path) -> None:
    db = _database(tmp_path)
    threads: list[int] = []

    async def writer(first: int) -> None:
        for n in range(first, first + 20):
            await db.run(_insert(n, threads))
            await db.run(lambda conn: conn.execute("SELECT COUNT(*) FROM t").fetchone())

    async with anyio.create_task_group() as group:
        for first in range(0, 2000, 20):
            group.start_soon(writer, first)
    assert _rows(db) == list(range(2000))
    assert set(threads) == {threading.get_ident()}
    await db.close()


async def test_writers_locked_out_by_another_connection_wait_one_at_a_time(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    other = connect(tmp_path / "k.db")  # stands for another process holding the write lock
    other.execute("BEGIN IMMEDIATE")
    threads: list[int] = []
    done = 0

    async def writer(n: int) -> None:
        nonlocal done
        await db.run(_insert(n, threads))
        done += 1

    async with anyio.create_task_group() as group:
        for n in range(50):
            group.start_soon(writer, n)
        await anyio.sleep(0.2)
        assert done == 0  # all still waiting for the lock...
        other.execute("COMMIT")  # ...until the other writer lets go
    assert _rows(db) == list(range(50))
    loop = threading.get_ident()
    # Only the first waited in a worker thread (busy timeout); the others queued on the
    # loop and ran there once it was through.
    assert len([t for t in threads if t != loop]) == 1
    other.close()
    await db.close()


async def test_a_cancelled_queued_call_leaves_the_database_usable(tmp_path: Path) -> None:
    db = _database(tmp_path)
    other = connect(tmp_path / "k.db")
    other.execute("BEGIN IMMEDIATE")
    threads: list[int] = []

    async with anyio.create_task_group() as group:
        group.start_soon(db.run, _insert(1, threads))
        await anyio.sleep(0.05)  # it waits in a worker thread
        with anyio.CancelScope() as queued:
            queued.deadline = anyio.current_time() + 0.1
            await db.run(_insert(2, threads))  # queued behind it, then cancelled
        assert queued.cancelled_caught
        other.execute("COMMIT")
    await db.run(_insert(3, threads))
    assert _rows(db) == [1, 3]
    other.close()
    await db.close()


async def test_a_connection_in_use_in_another_thread_is_waited_for_off_the_loop(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    inside, release = threading.Event(), threading.Event()
    ticks = 0

    def hold(conn: sqlite3.Connection) -> None:
        inside.set()
        release.wait()

    async def heartbeat() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await anyio.sleep(0.01)

    holder = threading.Thread(target=db.call, args=(hold,))
    holder.start()
    inside.wait()
    async with anyio.create_task_group() as group:
        group.start_soon(heartbeat)
        group.start_soon(db.run, _insert(1, []))
        await anyio.sleep(0.1)
        release.set()
    holder.join()
    assert ticks >= 3  # the loop kept running while the call waited for the connection
    assert _rows(db) == [1]
    await db.close()


async def test_transactions_asked_for_together_commit_together_and_fail_alone(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    results: dict[int, object] = {}

    def insert_twice(n: int):  # type: ignore[no-untyped-def]
        def write(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO t (n) VALUES (?)", (n,))
            if n % 10 == 3:
                conn.execute("INSERT INTO t (n) VALUES (?)", (n,))  # a duplicate: fails
            if n % 10 == 7:
                raise LookupError(n)
            return n * 2

        return write

    async def writer(n: int) -> None:
        try:
            results[n] = await db.transact(insert_twice(n))
        except Exception as exc:
            results[n] = exc

    async with anyio.create_task_group() as group:
        for n in range(100):
            group.start_soon(writer, n)
    # Each failed transaction was rolled back alone, and only its caller saw the error.
    assert _rows(db) == [n for n in range(100) if n % 10 not in (3, 7)]
    for n, result in results.items():
        if n % 10 == 3:
            assert isinstance(result, StorageError)
            assert "UNIQUE" in str(result)
        elif n % 10 == 7:
            assert isinstance(result, LookupError)
        else:
            assert result == n * 2
    await db.close()


async def test_a_transaction_waits_for_a_database_locked_by_another_connection(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    other = connect(tmp_path / "k.db")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t (n) VALUES (0)")

    done = 0

    async def writer(n: int) -> None:
        nonlocal done
        await db.transact(lambda conn: conn.execute("INSERT INTO t (n) VALUES (?)", (n,)))
        done += 1

    async with anyio.create_task_group() as group:
        for n in range(1, 21):
            group.start_soon(writer, n)
        await anyio.sleep(0.2)
        assert done == 0
        other.execute("COMMIT")
    assert _rows(db) == list(range(21))
    other.close()
    await db.close()


async def test_a_write_that_outlives_its_unit_of_work_is_committed(tmp_path: Path) -> None:
    """Work started inside a unit (a task, a worker thread's late report) sees the unit in its
    context; once the unit has committed, its writes must not be held back by it forever."""
    db = _database(tmp_path)
    ended = anyio.Event()
    threads: list[int] = []

    async def later() -> None:
        await ended.wait()
        await db.write(_insert(2, threads))

    async with anyio.create_task_group() as group:
        async with db.unit_of_work():
            await db.write(_insert(1, threads))
            group.start_soon(later)
        ended.set()
    assert _rows(db) == [1, 2]
    await db.close()


async def test_a_flush_that_fails_keeps_the_held_writes_for_the_units_end(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    threads: list[int] = []

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    async with db.unit_of_work():
        await db.write(_insert(1, threads))
        with pytest.raises(StorageError):
            await db.commit_with(broken)
    assert _rows(db) == [1]
    await db.close()


def test_opening_a_database_loads_sqlite_vec_without_importing_numpy(tmp_path: Path) -> None:
    # Every command opens the database: sqlite-vec's package imports NumPy (a tenth of a
    # second or more), which the extension itself does not need. A fresh interpreter: this
    # one has imported NumPy long ago.
    import os
    import subprocess
    import sys

    src = Path(__file__).resolve().parents[2] / "src"
    code = (
        "import sys\n"
        "from providers.sqlite.database import connect\n"
        f"conn = connect({str(tmp_path / 'a.db')!r})\n"
        "print(conn.execute('select vec_version()').fetchone()[0])\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("v")


def test_none_is_stored_as_null(tmp_path) -> None:
    # None adapts to itself (bound quickly, see ``connect``): still SQL NULL, found by IS NULL.
    conn = connect(tmp_path / "nulls.db")
    conn.execute("CREATE TABLE t (a TEXT, b INTEGER)")
    conn.execute("INSERT INTO t VALUES (?, ?)", (None, None))
    assert conn.execute("SELECT typeof(a), typeof(b) FROM t").fetchone() == ("null", "null")
    assert (
        conn.execute("SELECT count(*) FROM t WHERE a IS NULL AND b IS ?", (None,)).fetchone()[0]
        == 1
    )
    conn.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_writer_cancelled_past_its_shield_leaves_no_one_waiting(tmp_path: Path) -> None:
    # asyncio's own cancel (what Ctrl-C sends the main task) goes through anyio's shield. The
    # writer that gathers a group of writes was cancelled so while others had joined it: the
    # group was never applied, and every write after it waited for ever (the host hung).
    import asyncio

    db = _database(tmp_path)

    def insert(n: int):  # type: ignore[no-untyped-def]
        return lambda conn: conn.execute("INSERT INTO t (n) VALUES (?)", (n,))

    leader = asyncio.create_task(db.transact(insert(1)))
    joined = asyncio.create_task(db.transact(insert(2)))
    await asyncio.sleep(0)  # the leader gathers, the other joins its group
    leader.cancel()
    with anyio.fail_after(10):
        await joined
        await db.transact(insert(3))  # a write after them is not stuck either
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert _rows(db) == [1, 2, 3]  # the group was applied all the same
    await db.close()


async def test_a_fence_guards_its_own_database_only(tmp_path: Path) -> None:
    # A run's lease fence is about the task store's file: a store the host keeps in another
    # file is written as usual inside it (it failed every such write as a lost lease).
    guarded = _database(tmp_path)
    other = SqliteDatabase(tmp_path / "other.db")
    other.call(lambda conn: conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)"))

    def refuse(conn: sqlite3.Connection) -> None:
        raise StorageError("not ours any more")

    with guarded.fenced(refuse):
        await other.transact(lambda conn: conn.execute("INSERT INTO t (n) VALUES (1)"))
        with pytest.raises(StorageError, match="not ours"):
            await guarded.transact(lambda conn: conn.execute("INSERT INTO t (n) VALUES (1)"))
    assert _rows(guarded) == []
    assert other.call(lambda conn: conn.execute("SELECT n FROM t").fetchall()) == [(1,)]
    await guarded.close()
    await other.close()


async def test_writes_handed_over_commit_with_the_hidden_units_next_commit(
    tmp_path: Path,
) -> None:
    """A run's final step hands its writes to the run's unit: one commit, the ending's."""
    db = _database(tmp_path)
    threads: list[int] = []
    heard: list[str] = []

    async def hear() -> None:
        heard.append("step")

    async with db.unit_of_work():  # the run's
        with db.independent_work():
            async with db.unit_of_work():  # its last step's
                await db.write(_insert(1, threads))
                db.after_commit(hear)
                assert db.hand_over()
            assert _rows(db) == []  # not committed when the step ended
            assert heard == []
        await db.commit_with(_insert(2, threads))  # the ending: one commit for both
        assert _rows(db) == [1, 2]
        assert heard == ["step"]
    await db.close()


async def test_handed_over_writes_whose_fence_fails_are_left_out_alone(tmp_path: Path) -> None:
    """Writes made for a task whose lease was lost meanwhile never land; the rest commits."""
    db = _database(tmp_path)
    threads: list[int] = []
    heard: list[str] = []
    owner = ["us"]

    def still_ours(conn: sqlite3.Connection) -> None:
        if owner[0] != "us":
            raise LeaseLostError("t1", owner[0])

    async def hear() -> None:
        heard.append("lost step")

    async with db.unit_of_work():
        with db.independent_work(), db.fenced(still_ours):
            async with db.unit_of_work():
                await db.write(_insert(1, threads))
                db.after_commit(hear)
                assert db.hand_over()
        owner[0] = "another kernel"
        await db.commit_with(_insert(2, threads))
    assert _rows(db) == [2]
    assert heard == []
    await db.close()


async def test_nothing_is_handed_over_without_a_hidden_unit(tmp_path: Path) -> None:
    db = _database(tmp_path)
    threads: list[int] = []
    async with db.unit_of_work():
        await db.write(_insert(1, threads))
        assert not db.hand_over()  # no independent_work hid a unit: the block commits it
    assert _rows(db) == [1]
    with db.independent_work():  # nothing was open to hide
        async with db.unit_of_work():
            await db.write(_insert(2, threads))
            assert not db.hand_over()
    assert _rows(db) == [1, 2]
    await db.close()
