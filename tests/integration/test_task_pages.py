"""Browsing many tasks a page at a time (``ITaskStore.page_tasks``), on SQLite and the fake."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from core_agent.contracts.errors import UsageError
from core_agent.contracts.task_store import ITaskStore
from fakes.stores import FakeTaskStore
from providers.sqlite.task_store import SqliteTaskStore
from shared.agent_protocol import TaskQueued, TaskRequest, TaskState, TaskStatus

pytestmark = pytest.mark.anyio

START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "fake"])
async def store(request, tmp_path) -> AsyncIterator[ITaskStore]:
    store: ITaskStore = (
        SqliteTaskStore(tmp_path / "k.db") if request.param == "sqlite" else FakeTaskStore()
    )
    yield store
    await store.close()


async def add(
    store: ITaskStore,
    n: int,
    text: str,
    *,
    session: str = "s1",
    output: str | None = None,
    at: datetime | None = None,
) -> str:
    task_id = f"task-{n:04d}"
    created = at or START + timedelta(seconds=n)
    state = TaskState(
        task_id=task_id,
        session_id=session,
        trace_id=f"trace-{n}",
        status=TaskStatus.QUEUED,
        request=TaskRequest(task=text),
        created_at=created,
        updated_at=created,
    )
    queued = TaskQueued(
        event_id=f"{task_id}-e1",
        task_id=task_id,
        seq=1,
        occurred_at=created,
        session_id=session,
        trace_id=state.trace_id,
        request=state.request,
    )
    await store.create_task(state, queued)
    if output is not None:
        await store.transition(task_id, from_status=TaskStatus.QUEUED, to_status=TaskStatus.RUNNING)
        await store.transition(
            task_id, from_status=TaskStatus.RUNNING, to_status=TaskStatus.SUCCEEDED, output=output
        )
    return task_id


async def every_page(store: ITaskStore, **filters: object) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = await store.page_tasks(cursor=cursor, **filters)  # type: ignore[arg-type]
        pages.append([t.task_id for t in page.tasks])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


async def test_pages_walk_every_task_newest_first_once(store) -> None:
    # Three tasks share one instant: the order among them is still total and stable.
    ids = [await add(store, n, f"task {n}") for n in range(7)]
    same = START + timedelta(seconds=100)
    ids += [await add(store, n, f"task {n}", at=same) for n in range(7, 10)]
    pages = await every_page(store, limit=3)
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    walked = [task_id for page in pages for task_id in page]
    assert sorted(walked) == sorted(ids)
    assert walked[3:] == [f"task-{n:04d}" for n in range(6, -1, -1)]
    # A page that ends exactly at the last task says so (no empty page after it).
    assert [len(p) for p in await every_page(store, limit=5)] == [5, 5]


async def test_a_page_does_not_shift_when_newer_tasks_arrive(store) -> None:
    for n in range(6):
        await add(store, n, f"task {n}")
    first = await store.page_tasks(limit=3)
    await add(store, 50, "a new one")  # arrives while the person reads page 1
    second = await store.page_tasks(cursor=first.next_cursor, limit=3)
    assert [t.task_id for t in second.tasks] == ["task-0002", "task-0001", "task-0000"]


async def test_filters_by_status_session_and_text(store) -> None:
    await add(store, 1, "Summarise the quarterly report", output="Revenue grew 12%.")
    await add(store, 2, "What is 6 * 7?", session="s2", output="6 * 7 = 42")
    await add(store, 3, "把这份报告翻译成英文", session="s2")
    await add(store, 4, 'Say "hello"\nand 100% more', output="好的，已经翻译完成")
    await add(store, 5, "under_score")
    await add(store, 6, "underXscore")
    await add(store, 7, "columns\tsplit by tabs", output="un café crème, déjà vu")

    async def ids(**filters: object) -> list[str]:
        return [task_id for page in await every_page(store, **filters) for task_id in page]

    succeeded = await ids(status=TaskStatus.SUCCEEDED)
    assert succeeded == ["task-0007", "task-0004", "task-0002", "task-0001"]
    assert await ids(session_id="s2") == ["task-0003", "task-0002"]
    assert await ids(session_id="s2", status=TaskStatus.QUEUED) == ["task-0003"]
    # Request text or output, in either case for ASCII letters; Chinese in both.
    assert await ids(text="REPORT") == ["task-0001"]
    assert await ids(text="revenue") == ["task-0001"]
    assert await ids(text="报告") == ["task-0003"]
    assert await ids(text="翻译") == ["task-0004", "task-0003"]
    # What a person types matches the text, not its stored escapes; % and _ are literal.
    assert await ids(text='"hello"\nand') == ["task-0004"]
    assert await ids(text="100%") == ["task-0004"]
    assert await ids(text="12%") == ["task-0001"]
    assert await ids(text="under_") == ["task-0005"]
    assert await ids(text="café crème") == ["task-0007"]  # stored as \u00e9 in the output
    assert await ids(text="columns\tsplit") == ["task-0007"]
    assert await ids(text="nothing like it") == []
    # Reviewer: a NUL (the viewer's ?q=%00) cut SQLite's LIKE pattern to "%": every task.
    await add(store, 8, "a NUL\x00 inside")
    assert await ids(text="\x00") == ["task-0008"]
    assert await ids(text="NUL\x00 in") == ["task-0008"]


async def test_a_filtered_listing_pages_too(store) -> None:
    for n in range(10):
        await add(store, n, "even" if n % 2 == 0 else "odd")
    pages = await every_page(store, text="even", limit=2)
    assert pages == [["task-0008", "task-0006"], ["task-0004", "task-0002"], ["task-0000"]]


async def test_a_cursor_that_is_not_one_is_refused_clearly(store) -> None:
    await add(store, 1, "task")
    with pytest.raises(UsageError, match="not a page cursor"):
        await store.page_tasks(cursor="garbage")


async def test_a_damaged_row_does_not_hide_the_others(tmp_path) -> None:
    store = SqliteTaskStore(tmp_path / "k.db")
    await add(store, 1, "fine")
    await add(store, 2, "damaged")
    await store._db.run(  # what a crash or a stray tool could leave
        lambda conn: conn.execute("UPDATE agent_tasks SET usage_json = '{' WHERE id = 'task-0002'")
    )
    page = await store.page_tasks()
    assert [t.task_id for t in page.tasks] == ["task-0001"]
    await store.close()
