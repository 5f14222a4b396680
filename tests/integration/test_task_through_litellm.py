"""A whole task: kernel → ReAct → litellm → loopback OpenAI server → tool → SQLite stores."""

import pytest

from core_agent.container import create_kernel
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio


async def test_a_task_with_a_tool_call_succeeds_and_is_fully_recorded(
    litellm_settings, openai_server
) -> None:
    openai_server.reply(
        None,
        tool_calls=[
            {"id": "call_1", "name": "calculator", "arguments": {"expression": "17 * 23 + 4"}}
        ],
    )
    openai_server.reply("17 * 23 + 4 is 395.")

    async with create_kernel(litellm_settings) as kernel:
        streamed = [
            event async for event in kernel.stream_task(TaskRequest(task="What is 17 * 23 + 4?"))
        ]
        task_id = streamed[0].task_id
        state = await kernel.get_task(task_id)
        persisted = await kernel.task_events(task_id)
        spans = await kernel.task_spans(task_id)

    assert state.status is TaskStatus.SUCCEEDED
    assert state.output == "17 * 23 + 4 is 395."
    kinds = [e.kind for e in persisted]
    assert kinds == [
        "task.queued",
        "task.started",
        "task.strategy_selected",
        "llm.completed",
        "tool.started",
        "policy.decided",
        "tool.completed",
        "llm.completed",
        "task.succeeded",
    ]
    # seq numbers the live stream; the log skips the (ephemeral) deltas but keeps the order.
    assert [e.seq for e in persisted] == sorted({e.seq for e in persisted})
    assert [e.seq for e in streamed] == list(range(1, len(streamed) + 1))
    assert [e for e in streamed if e.kind != "llm.delta"] == persisted
    assert persisted[6].result.content == "395"
    assert (persisted[5].risk.value, persisted[5].rule) == ("low", "tool-check:calculator")

    # The model saw the tool's result on its second call.
    second = openai_server.requests[1]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "395"}

    by_kind = {}
    for span in spans:
        by_kind.setdefault(span.kind, []).append(span)
    assert len(by_kind["llm"]) == 2 and len(by_kind["tool"]) == 1
    for span in by_kind["llm"]:
        assert span.status == "ok" and span.tokens_in > 0 and span.tokens_out > 0
        assert span.latency_ms >= 0 and span.name == "openai/test-model"
    (tool_span,) = by_kind["tool"]
    assert tool_span.name == "calculator" and tool_span.status == "ok"
    (root,) = by_kind["task"]
    (run,) = by_kind["run"]
    assert run.parent_span_id == root.span_id and root.parent_span_id is None
    assert all(s.parent_span_id == run.span_id for s in by_kind["llm"] + by_kind["tool"])
    assert root.tokens_in == run.tokens_in == sum(s.tokens_in for s in by_kind["llm"])
    assert state.usage.input_tokens == root.tokens_in


async def test_a_model_error_fails_the_task_and_leaves_consistent_records(
    litellm_settings, openai_server
) -> None:
    openai_server.reply(status=500, error_message="model crashed")
    async with create_kernel(litellm_settings) as kernel:
        result = await kernel.execute_task(TaskRequest(task="hello"))
        events = await kernel.task_events(result.task_id)
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.FAILED
    assert result.error_type == "ModelError" and "model crashed" in result.error
    assert events[-1].kind == "task.failed" and "model crashed" in events[-1].error
    assert [s.status for s in spans if s.kind == "llm"] == ["error"]
    assert all(s.ended_at >= s.started_at for s in spans)


async def test_malformed_arguments_from_the_model_go_back_to_it(
    litellm_settings, openai_server
) -> None:
    openai_server.reply(None, tool_calls=[{"name": "calculator", "arguments": "{expression: 1+"}])
    openai_server.reply("Sorry, I sent broken arguments.")
    async with create_kernel(litellm_settings) as kernel:
        result = await kernel.execute_task(TaskRequest(task="1+1"))
    assert result.status is TaskStatus.SUCCEEDED
    tool_message = openai_server.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "must be a JSON object" in tool_message["content"]
