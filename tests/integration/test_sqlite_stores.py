import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.errors import (
    DataTooNewError,
    InvalidTransitionError,
    StorageError,
    TaskNotFoundError,
)
from core_agent.contracts.trace_store import Span
from core_agent.kernel.agent_kernel import AgentKernel
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedTurn
from providers.sqlite import database
from providers.sqlite.database import (
    SqliteDatabase,
    connect,
    sqlite_driver,
)
from providers.sqlite.migrations import MIGRATIONS, schema_version
from providers.sqlite.task_store import SqliteTaskStore
from providers.sqlite.trace_store import SqliteTraceStore
from shared.agent_protocol import (
    TaskQueued,
    TaskRequest,
    TaskStarted,
    TaskState,
    TaskStatus,
    TokenUsage,
)

pytestmark = pytest.mark.anyio


def test_sqlite_vec_loads_even_where_stdlib_sqlite3_cannot_load_extensions(tmp_path) -> None:
    conn = connect(tmp_path / "v.db")
    (version,) = conn.execute("SELECT vec_version()").fetchone()
    assert version.startswith("v")
    conn.execute("CREATE VIRTUAL TABLE v USING vec0(embedding float[3])")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1, 0, 0]'), (2, '[0, 1, 0]')")
    nearest = conn.execute(
        "SELECT rowid FROM v WHERE embedding MATCH '[0.9, 0.1, 0]' AND k = 1"
    ).fetchall()
    assert nearest == [(1,)]
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        # This machine's Python: the fallback driver is what made the above work.
        assert sqlite_driver().__name__ == "sqlean"


def test_the_database_is_wal_and_migrated_to_the_latest_version(tmp_path) -> None:
    db = SqliteDatabase(tmp_path / "k.db")
    assert db.call(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0]) == "wal"
    assert db.call(schema_version) == len(MIGRATIONS)
    tables = {
        r[0]
        for r in db.call(
            lambda c: c.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        )
    }
    assert {"agent_sessions", "agent_tasks", "agent_task_events", "agent_traces"} <= tables
    # Opening again (a restart) re-runs nothing and keeps the version.
    assert SqliteDatabase(tmp_path / "k.db").call(schema_version) == len(MIGRATIONS)


async def test_a_database_from_a_newer_build_is_refused_before_anything_is_written(
    tmp_path,
) -> None:
    path = tmp_path / "k.db"
    store = SqliteTaskStore(path)
    await store.create_task(*_task("old"))
    await store.close()
    newer = len(MIGRATIONS) + 1
    # What a newer build's migration could do: a column its writes need, kept by a trigger.
    with sqlite_driver().connect(str(path)) as conn:
        conn.execute("ALTER TABLE agent_tasks ADD COLUMN priority INTEGER")
        conn.execute(
            "CREATE TRIGGER need_priority BEFORE INSERT ON agent_tasks WHEN new.priority IS NULL"
            " BEGIN SELECT RAISE(ABORT, 'priority is required'); END"
        )
        conn.execute(f"PRAGMA user_version = {newer}")
    conn.close()
    stored = path.read_bytes()
    for open_it in (SqliteDatabase, SqliteDatabase.open, SqliteTaskStore, SqliteTraceStore):
        with pytest.raises(DataTooNewError) as refused:
            open_it(path)
        assert (refused.value.path, refused.value.version) == (str(path), newer)
        assert refused.value.supported == len(MIGRATIONS)
        assert f"{path} has schema version {newer}" in str(refused.value)
    assert path.read_bytes() == stored
    # A failed open holds nothing: the file can be opened by the newer build at once.
    with sqlite_driver().connect(str(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == newer
    conn.close()


def _task(task_id: str = "t1") -> tuple[TaskState, TaskQueued]:
    now = datetime.now(UTC)
    state = TaskState(
        task_id=task_id,
        session_id="s1",
        trace_id="tr",
        status=TaskStatus.QUEUED,
        request=TaskRequest(task="do it"),
        created_at=now,
        updated_at=now,
    )
    queued = TaskQueued(
        event_id=f"{task_id}-e1",
        task_id=task_id,
        seq=1,
        occurred_at=now,
        session_id="s1",
        trace_id="tr",
        request=state.request,
    )
    return state, queued


async def test_a_task_from_before_response_models_were_recorded_reads_back(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    await store.create_task(*_task("old"))
    structured, queued = _task("new")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "title": "N"}
    recorded = {"response_schema": schema, "response_model": "app.models:N"}
    structured = structured.model_copy(update=recorded)
    await store.create_task(structured, queued)
    await store.close()
    # Back to the schema before migration 8.
    with sqlite_driver().connect(str(tmp_path / "k.db")) as conn:
        conn.execute("ALTER TABLE agent_tasks DROP COLUMN response_schema_json")
        conn.execute("ALTER TABLE agent_tasks DROP COLUMN response_model")
        conn.execute("PRAGMA user_version = 7")
    store = SqliteTaskStore(tmp_path / "k.db")  # migrates
    old = await store.get_task("old")
    assert old.response_schema is None and old.response_model is None
    again_state, again_queued = _task("again")
    await store.create_task(again_state.model_copy(update=recorded), again_queued)
    again = await store.get_task("again")
    assert (again.response_schema, again.response_model) == (schema, "app.models:N")
    await store.close()


async def test_tasks_are_matched_by_id_prefix_then_by_trace_id(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    for task_id in ("abc1", "abc2", "abd", "ab"):
        state, queued = _task(task_id)
        await store.create_task(state.model_copy(update={"trace_id": f"trace-{task_id}"}), queued)
    assert await store.match_task_ids("abc") == ["abc1", "abc2"]
    assert await store.match_task_ids("abd") == ["abd"]
    assert await store.match_task_ids("ab", limit=2) == ["ab", "abc1"]
    assert await store.match_task_ids("trace-abd") == ["abd"]
    assert await store.match_task_ids("zz") == []
    assert await store.match_task_ids("") == []
    await store.close()


async def test_the_kernel_finds_a_task_by_prefix_trace_id_or_last(tmp_path) -> None:
    from core_agent import KernelContainer
    from core_agent.contracts.errors import TaskNotFoundError, UsageError
    from core_agent.contracts.settings import AgentSettings

    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path))
    kernel = container.kernel()
    with pytest.raises(TaskNotFoundError):
        await kernel.find_task_id("last")
    store = container.task_store()
    for task_id in ("abc1", "abc2", "abd"):
        state, queued = _task(task_id)
        await store.create_task(state.model_copy(update={"trace_id": f"trace-{task_id}"}), queued)
    assert await kernel.find_task_id("abd") == "abd"
    assert await kernel.find_task_id("abc1") == "abc1"
    assert await kernel.find_task_id("trace-abc2") == "abc2"
    assert await kernel.find_task_id("last") == "abd"
    with pytest.raises(UsageError, match="several task ids: abc1, abc2"):
        await kernel.find_task_id("abc")
    with pytest.raises(TaskNotFoundError):
        await kernel.find_task_id("zz")
    await kernel.aclose()


def _started(task_id: str = "t1", seq: int = 2) -> TaskStarted:
    return TaskStarted(
        event_id=f"{task_id}-e{seq}", task_id=task_id, seq=seq, occurred_at=datetime.now(UTC)
    )


async def test_tasks_and_events_survive_a_restart(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    state, queued = _task()
    await store.create_task(state, queued)
    await store.transition(
        "t1",
        from_status=TaskStatus.QUEUED,
        to_status=TaskStatus.RUNNING,
        event=_started(),
        strategy="react",
    )
    await store.close()

    reopened = SqliteTaskStore(tmp_path / "k.db")
    task = await reopened.get_task("t1")
    assert task.status is TaskStatus.RUNNING and task.strategy == "react"
    assert task.request == state.request
    assert [e.kind for e in await reopened.list_events("t1")] == ["task.queued", "task.started"]
    assert [t.task_id for t in await reopened.list_tasks(session_id="s1")] == ["t1"]


async def test_a_stale_transition_is_refused_and_writes_nothing(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    state, queued = _task()
    await store.create_task(state, queued)
    with pytest.raises(InvalidTransitionError, match="'queued' to 'succeeded'"):
        await store.transition(
            "t1",
            from_status=TaskStatus.RUNNING,
            to_status=TaskStatus.SUCCEEDED,
            event=_started(),
            output="x",
            usage=TokenUsage(input_tokens=5),
        )
    task = await store.get_task("t1")
    assert task.status is TaskStatus.QUEUED and task.output is None
    assert len(await store.list_events("t1")) == 1
    with pytest.raises(TaskNotFoundError):
        await store.transition("nope", from_status=TaskStatus.QUEUED, to_status=TaskStatus.RUNNING)


async def test_a_failed_write_rolls_back_the_whole_transition(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    state, queued = _task()
    await store.create_task(state, queued)
    duplicate_seq = _started(seq=1)  # seq 1 is taken: the event insert fails
    with pytest.raises(StorageError):
        await store.transition(
            "t1", from_status=TaskStatus.QUEUED, to_status=TaskStatus.RUNNING, event=duplicate_seq
        )
    assert (await store.get_task("t1")).status is TaskStatus.QUEUED


async def test_creating_a_task_twice_leaves_the_first_intact(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    state, queued = _task()
    await store.create_task(state, queued)
    with pytest.raises(StorageError):
        await store.create_task(
            state.model_copy(update={"request": TaskRequest(task="other")}), queued
        )
    assert (await store.get_task("t1")).request.task == "do it"
    assert len(await store.list_events("t1")) == 1


async def test_spans_round_trip_in_start_order(tmp_path) -> None:
    store = SqliteTraceStore(tmp_path / "k.db")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    later = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    await store.record(
        Span(
            span_id="b",
            trace_id="tr",
            task_id="t1",
            kind="tool",
            name="calc",
            started_at=later,
            ended_at=later,
            status="error",
            error="boom",
        )
    )
    await store.record(
        Span(
            span_id="a",
            trace_id="tr",
            task_id="t1",
            kind="llm",
            name="m",
            started_at=t0,
            ended_at=later,
            tokens_in=10,
            tokens_out=3,
            cost_usd=0.001,
            attributes={"turn": 1},
        )
    )
    spans = await store.list_spans(task_id="t1")
    assert [s.span_id for s in spans] == ["a", "b"]
    assert spans[0].latency_ms == 1000.0
    assert (spans[0].tokens_in, spans[0].tokens_out, spans[0].attributes) == (10, 3, {"turn": 1})
    assert spans[1].error == "boom"
    assert await store.list_spans(trace_id="tr") == spans


async def test_a_stored_tasks_spans_are_found_by_its_trace_id(tmp_path) -> None:
    tasks, traces = SqliteTaskStore(tmp_path / "k.db"), SqliteTraceStore(tmp_path / "k.db")
    for task_id in ("t1", "t2"):
        state, queued = _task(task_id)
        await tasks.create_task(state.model_copy(update={"trace_id": f"tr-{task_id}"}), queued)
        moment = datetime(2026, 1, 1, tzinfo=UTC)
        for name in ("a", "b"):
            await traces.record(
                Span(
                    span_id=f"{task_id}{name}",
                    trace_id=f"tr-{task_id}",
                    task_id=task_id,
                    kind="llm",
                    name=name,
                    started_at=moment,
                    ended_at=moment,
                )
            )
    by_trace = await traces.list_spans(trace_id="tr-t2")
    assert [s.span_id for s in by_trace] == ["t2a", "t2b"]
    assert by_trace == await traces.list_spans(task_id="t2")
    assert await traces.list_spans(trace_id="tr-unknown") == []
    await tasks.close()
    await traces.close()


async def test_a_closed_store_raises_a_storage_error(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    await store.close()
    with pytest.raises(StorageError, match="closed"):
        await store.get_task("t1")


async def test_a_writer_locked_out_by_another_process_waits_off_the_event_loop(tmp_path) -> None:

    store = SqliteTaskStore(tmp_path / "k.db")
    other = connect(tmp_path / "k.db")  # stands for another process holding the write lock
    other.execute("BEGIN IMMEDIATE")
    ticks = 0
    done = anyio.Event()

    async def write() -> None:
        state, queued = _task()
        await store.create_task(state, queued)
        done.set()

    async def heartbeat() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(write)
        group.start_soon(heartbeat)
        await anyio.sleep(0.2)
        assert not done.is_set()  # still waiting for the lock...
        other.execute("COMMIT")  # ...until the other writer lets go
    assert ticks >= 3  # the loop kept running while the write waited
    assert (await store.get_task("t1")).status is TaskStatus.QUEUED
    assert len(await store.list_events("t1")) == 1


def test_a_wal_a_reader_kept_from_being_copied_is_not_restarted_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The restart runs on the kernel's connection while the event loop's calls wait: it must
    # only copy what came after a checkpoint that copied everything else, never the backlog a
    # reader's snapshot held back (that is for a background checkpoint, once it is gone).
    monkeypatch.setattr(database, "WAL_SIZE_LIMIT_BYTES", 2 << 20)
    monkeypatch.setattr(database, "CHECKPOINT_WAL_BYTES", 1 << 20)
    path = tmp_path / "k.db"
    db = SqliteDatabase(path)

    def checkpoint() -> None:
        db.checkpoint_soon()
        with db._checkpoint_lock:  # held by the background checkpoint until it is done
            pass

    db.call(lambda conn: conn.execute("CREATE TABLE blobs (data BLOB)"))
    reader = sqlite_driver().connect(str(path), isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM blobs").fetchone()  # a snapshot from before the writes
    for _ in range(300):
        db.call(lambda conn: conn.execute("INSERT INTO blobs VALUES (randomblob(8000))"))
    checkpoint()
    assert not db._restart_due
    reader.execute("COMMIT")
    reader.close()
    checkpoint()
    assert db._restart_due


def answering_kernel(data_dir: Path) -> tuple[AgentKernel, Path]:
    """A kernel on ``data_dir`` whose model answers every task at once; its WAL's path."""
    container = KernelContainer()
    container.settings.override(container.settings().model_copy(update={"data_dir": data_dir}))
    container.llm_gateway.override(ScriptedLLMGateway(policy=lambda _: ScriptedTurn(content="ok")))
    return container.kernel(), data_dir / "core_agent.db-wal"


async def test_the_wal_starts_over_while_a_kernel_keeps_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel that never closes still folds its write-ahead log back and starts it over:
    # without that, the file only ever grows (hundreds of MiB after a few thousand tasks).
    # Smaller bounds than the shipped ones, so that 400 tasks cross them several times.
    limit = 8 << 20
    monkeypatch.setattr(database, "WAL_SIZE_LIMIT_BYTES", limit)
    monkeypatch.setattr(database, "CHECKPOINT_WAL_BYTES", 2 << 20)
    kernel, wal = answering_kernel(tmp_path / "data")

    def wal_state() -> tuple[int, int]:
        # The WAL header's checkpoint sequence number (bytes 12-15, big-endian) goes up each
        # time the WAL starts over from its beginning; the file keeps its size when it does.
        header = wal.read_bytes()[:16] if wal.exists() else b""
        restarts = int.from_bytes(header[12:16], "big") if len(header) == 16 else 0
        return restarts, wal.stat().st_size if wal.exists() else 0

    states: list[tuple[int, int]] = []
    async with kernel:
        for number in range(400):
            await kernel.execute_task(TaskRequest(task=f"task {number}", force_mode="react"))
            states.append(wal_state())
        assert len(await kernel.list_tasks(limit=1000)) == 400
    # It started over more than once, and its file never grew past the limit by more than the
    # writes between two looks at the WAL (about 0.3 MiB here).
    assert states[-1][0] - states[0][0] >= 2, states[::20]
    assert max(size for _, size in states) < limit + (1 << 20), states[::20]


async def test_the_wal_keeps_its_bound_when_background_checkpoints_fall_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a busy machine the background checkpoint can take longer than the kernel takes to
    # write past the bound (CI saw 11.4 MiB of WAL against 8). Here it never runs at all: the
    # WAL must still start over once it reaches its bound, copying what is left itself.
    limit = 4 << 20
    monkeypatch.setattr(database, "WAL_SIZE_LIMIT_BYTES", limit)
    monkeypatch.setattr(database.SqliteDatabase, "checkpoint_soon", lambda self: None)
    kernel, wal = answering_kernel(tmp_path / "data")
    sizes: list[int] = []
    async with kernel:
        for number in range(100):  # about 20 MiB of WAL frames
            await kernel.execute_task(TaskRequest(task=f"task {number}", force_mode="react"))
            sizes.append(wal.stat().st_size)
        assert len(await kernel.list_tasks(limit=1000)) == 100
    assert max(sizes) < limit + (1 << 20), sizes[::10]
