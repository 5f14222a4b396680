"""``TaskRecords.import_export`` stores a task whole or nothing of it, whatever fails.

Reviewer's probe: a span that failed to be stored (RecursionError) after the task and its
events were written left them stored (the unit of work keeps what was written, by design),
and the same file could not be imported again ("already in this data directory").
"""

import json
from pathlib import Path

import pytest

from core_agent import AgentSettings, create_kernel
from core_agent.contracts.errors import TaskNotFoundError, UsageError
from core_agent.contracts.trace_store import Span
from core_agent.replay import TaskRecords
from providers.sqlite.task_store import SqliteTaskStore
from providers.sqlite.trace_store import SqliteTraceStore
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio


class SecondSpanFails(SqliteTraceStore):
    """Stores the first span, then fails as a span no check foresaw would."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.recorded = 0

    async def record(self, span: Span) -> None:
        self.recorded += 1
        if self.recorded == 2:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        await super().record(span)


async def test_a_span_that_fails_to_be_stored_leaves_nothing_of_the_import(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "Hello."}]))
    settings = AgentSettings(data_dir=tmp_path / "data", scripted_model_script=script)
    async with create_kernel(settings) as kernel:
        result = await kernel.execute_task(TaskRequest(task="Say hello."))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    async with TaskRecords(settings) as records:
        lines = list(await records.export(result.task_id))
    assert sum('"type": "span"' in line for line in lines) >= 2

    elsewhere = AgentSettings(data_dir=tmp_path / "elsewhere")
    elsewhere.data_dir.mkdir()
    path = elsewhere.database_path
    tasks, traces = SqliteTaskStore(path), SecondSpanFails(path)
    try:
        async with TaskRecords(elsewhere, task_store=tasks, trace_store=traces) as records:
            with pytest.raises(UsageError, match="nothing was stored"):
                await records.import_export(lines, source="bug.jsonl")
            with pytest.raises(TaskNotFoundError):
                await records.load(result.task_id)
    finally:
        await tasks.close()
        await traces.close()
    left = SqliteTraceStore(path)
    try:
        assert await left.list_spans(task_id=result.task_id) == []
    finally:
        await left.close()

    # Nothing was left to refuse the file the next time.
    async with TaskRecords(elsewhere) as records:
        imported = await records.import_export(lines)
        assert imported.task_id == result.task_id
        assert len((await records.load(result.task_id)).spans) == len(
            [line for line in lines if '"type": "span"' in line]
        )
