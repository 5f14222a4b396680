"""A task's spans form one tree, with the content of its steps, on the real stores.

One task, driven by the loopback OpenAI server through the plain HTTP gateway: it is routed,
recalls memories, searches ingested knowledge (a tool call with a secret in its arguments,
whose retrieval is a span of its own), then asks for a write that needs a human (the task
waits, a human approves, a second run finishes it), with a host tool hook around each call
and a model call retried once. Its spans must make one tree under the task's root span,
hold what the steps saw and said (redacted, cut to the cap) or not (content off), and carry
the cache and reasoning tokens the server reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core_agent import ToolHook, create_kernel, tool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import CONTENT_ATTRIBUTES, CUT_MARK, Span
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus
from support.crash_harness import config_in, start_host
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

SECRET = "sk-proj-" + "Zq7" * 10
CAP = 300
KINDS = {
    "task",
    "run",
    "planning",
    "memory",
    "llm",
    "llm_attempt",
    "tool",
    "hook",
    "retrieval",
    "policy",
    "approval",
}
published: list[str] = []


@tool(capabilities={"write"})
def publish(note: str) -> str:
    """Publish a note for the team.

    Args:
        note: What to publish.
    """
    published.append(note)
    return f"published: {note}"


class Audit(ToolHook):
    name = "audit"


def settings_for(tmp_path: Path, server: OpenAIServer, **fields: Any) -> AgentSettings:
    return AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/gpt-4o-mini",
        model_api_base=server.base_url,
        model_api_key="sk-test",
        model_max_retries=1,
        model_retry_base_s=0,
        trace_content_max_chars=CAP,
        **fields,
    )


async def run_the_task(tmp_path: Path, server: OpenAIServer, **fields: Any) -> Any:
    """The task of the module docstring, to its end; its result and its spans."""
    published.clear()
    (tmp_path / "notes.md").write_text(
        "# Deploy notes\n\nDeploys go out on Tuesdays after the review. "
        + "The staging check must be green first. " * 20
    )
    kernel = create_kernel(
        settings_for(tmp_path, server, **fields), tools=[publish], tool_hooks=[Audit()]
    )
    async with kernel:
        await kernel.ingest(tmp_path / "notes.md")
        server.reply(status=503, error_message="overloaded")
        server.reply(
            tool_calls=[
                {
                    "id": "call_search",
                    "name": "knowledge_search",
                    "arguments": {"query": f"deploy day {SECRET}", "k": 2},
                }
            ],
            cached_tokens=5,
            reasoning_tokens=3,
        )
        server.reply(
            tool_calls=[{"id": "call_pub", "name": "publish", "arguments": {"note": "Tuesday"}}]
        )
        server.reply("Deploys go out on Tuesdays; I published a note.", cached_tokens=2)
        waiting = await kernel.execute_task(TaskRequest(task="When do we deploy? Tell the team."))
        assert waiting.status is TaskStatus.WAITING_APPROVAL, waiting.error
        assert waiting.pending_approval is not None
        done = await kernel.resolve_approval(
            waiting.pending_approval,
            ApprovalDecision(request_id=waiting.pending_approval, approved=True),
        )
        assert done.status is TaskStatus.SUCCEEDED, done.error
        assert published == ["Tuesday"]
        return done, await kernel.task_spans(done.task_id)


def check_one_tree(result: Any, spans: list[Span]) -> dict[str, list[Span]]:
    """One trace, one root (the task's), every parent present; the spans by kind."""
    assert {s.trace_id for s in spans} == {result.trace_id}
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    (root,) = [s for s in spans if s.parent_span_id is None]
    assert root.kind == "task"
    assert all(s.parent_span_id in by_id for s in spans if s is not root)
    assert {s.attributes["session_id"] for s in spans} == {result.session_id}
    by_kind: dict[str, list[Span]] = {}
    for span in spans:
        by_kind.setdefault(span.kind, []).append(span)
    assert set(by_kind) == KINDS
    return by_kind


def named(spans: list[Span], name: str) -> Span:
    (span,) = [s for s in spans if s.name == name]
    return span


async def test_one_task_makes_one_tree_holding_what_its_steps_saw_and_said(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    result, spans = await run_the_task(tmp_path, openai_server)
    by_kind = check_one_tree(result, spans)
    by_id = {s.span_id: s for s in spans}
    (root,) = by_kind["task"]
    assert root.attributes["task_status"] == "succeeded" and root.status == "ok"
    assert root.started_at <= min(s.started_at for s in spans)
    assert root.ended_at >= max(s.ended_at for s in spans if s is not root)

    # The route, the recall and the two runs (before and after the human) hang under the root.
    route = named(by_kind["planning"], "route")
    assert route.parent_span_id == root.span_id and route.attributes["strategy"] == "react"
    assert named(by_kind["memory"], "memory.recall").parent_span_id == root.span_id
    first, second = sorted(by_kind["run"], key=lambda s: s.started_at)
    assert {first.parent_span_id, second.parent_span_id} == {root.span_id}
    assert "suspended" in first.attributes and second.attributes["resumed"] is True
    decision = next(s for s in by_kind["approval"] if s.attributes.get("approved"))
    assert decision.parent_span_id == root.span_id and decision.name == "publish"

    # The model call that was retried: two tries under it, the first failed.
    llm = sorted(by_kind["llm"], key=lambda s: s.started_at)
    assert len(llm) == 3 and all(by_id[s.parent_span_id].kind == "run" for s in llm)
    tries = sorted(by_kind["llm_attempt"], key=lambda s: s.attributes["attempt"])
    assert [t.parent_span_id for t in tries] == [llm[0].span_id] * 2
    assert [t.attributes["outcome"] for t in tries] == ["retry", "ok"]
    # Cache and reasoning tokens as the server reported them, summed on the root.
    assert (llm[0].attributes["cache_read_tokens"], llm[0].attributes["reasoning_tokens"]) == (
        5,
        3,
    )
    assert "cache_read_tokens" not in llm[1].attributes
    assert root.attributes["cache_read_tokens"] == 7 and root.attributes["reasoning_tokens"] == 3
    assert root.tokens_in == sum(s.tokens_in or 0 for s in llm) == result.usage.input_tokens
    assert result.usage.cache_read_tokens == 7

    # Each tool call: its hook, its policy decision, and for the search its retrieval.
    search = named(by_kind["tool"], "knowledge_search")
    publish_spans = [s for s in by_kind["tool"] if s.name == "publish"]
    assert len(publish_spans) == 2  # suspended for the human, then run
    for call in (search, *publish_spans):
        children = {s.kind for s in spans if s.parent_span_id == call.span_id}
        assert {"hook", "policy"} <= children, (call.name, children)
    (retrieval,) = by_kind["retrieval"]
    assert retrieval.parent_span_id == search.span_id
    assert retrieval.attributes["hits"] and retrieval.attributes["hits"][0]["source"].endswith(
        "notes.md"
    )
    risky = next(s for s in by_kind["policy"] if s.name == "publish")
    assert risky.attributes["approval_required"] is True

    # Content: the prompt's messages (then only the new ones), the answers, the arguments
    # and results, the query and passages, redacted and cut to the cap.
    assert [m["role"] for m in llm[0].attributes["input_messages"]][-1] == "user"
    assert llm[0].attributes["input_messages"][-1]["content"] == (
        "When do we deploy? Tell the team."
    )
    assert llm[0].attributes["input_messages_from"] == 0
    assert [m["role"] for m in llm[1].attributes["input_messages"]] == ["tool"]
    assert llm[1].attributes["input_messages_from"] == len(llm[0].attributes["input_messages"]) + 1
    (asked,) = llm[0].attributes["output_message"]["tool_calls"]
    assert asked["name"] == "knowledge_search" and "[REDACTED]" in asked["arguments"]
    assert llm[2].attributes["output_message"]["content"].startswith("Deploys go out")
    assert "[REDACTED]" in search.attributes["arguments"]
    assert retrieval.attributes["query"] == "deploy day [REDACTED]"
    assert "Tuesdays" in retrieval.attributes["passages"][0]
    assert publish_spans[-1].attributes["result"] == "published: Tuesday"
    dumped = json.dumps([s.attributes for s in spans])
    assert SECRET not in dumped and SECRET[:20] not in dumped
    cut = CUT_MARK.split("{")[0]
    assert search.attributes["result"].startswith("[{")
    assert len(search.attributes["result"]) <= CAP + len(CUT_MARK) + 10
    assert cut in search.attributes["result"]
    system = llm[0].attributes["input_messages"][0]
    assert system["role"] == "system" and cut in system["content"]
    assert all(len(t) <= CAP + len(CUT_MARK) + 10 for t in texts(spans))


def texts(spans: list[Span]) -> list[str]:
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for span in spans:
        walk(span.attributes)
    return found


async def test_without_content_the_tree_is_whole_and_holds_no_content(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    result, spans = await run_the_task(tmp_path, openai_server, trace_content=False)
    by_kind = check_one_tree(result, spans)
    assert not [
        (s.kind, sorted(CONTENT_ATTRIBUTES & set(s.attributes)))
        for s in spans
        if CONTENT_ATTRIBUTES & set(s.attributes)
    ]
    assert "Tuesday" not in json.dumps([s.attributes for s in spans])
    # Reviewer: the route span held the task's clauses, and a policy span's reason may quote
    # a command's line: the policy's verdict and rule stay, its words are content.
    assert "deploy" not in json.dumps([s.attributes for s in spans]).lower()
    assert by_kind["policy"] and not [s for s in by_kind["policy"] if "reason" in s.attributes]
    assert all("rule" in s.attributes for s in by_kind["policy"])
    # What is not content stays: ids, scores, counts, tokens, decisions.
    (retrieval,) = by_kind["retrieval"]
    assert retrieval.attributes["hits"][0]["chunk_id"]
    assert all(s.tokens_in for s in by_kind["llm"])


@tool
def look_up(name: str) -> str:
    """Look a customer up.

    Args:
        name: Whose record.
    """
    raise ValueError(f"no record for {name} at 12 Elm St")


async def test_without_content_an_error_keeps_its_kind_not_its_text(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    # A tool's error quotes its arguments, a provider's quotes the prompt: with content off
    # the spans (and what is exported from them) kept both texts whole.
    settings = settings_for(tmp_path, openai_server, trace_content=False)
    openai_server.reply(
        tool_calls=[{"id": "c1", "name": "look_up", "arguments": {"name": "Alice Smith"}}]
    )
    openai_server.reply(status=400, error_message="Bad prompt: 'who is Alice Smith?'")
    async with create_kernel(settings, tools=[look_up]) as kernel:
        result = await kernel.execute_task(TaskRequest(task="Find Alice.", force_mode="react"))
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.FAILED
    errors = {(s.kind, s.error) for s in spans if s.error is not None}
    assert ("tool", "ToolExecutionError") in errors or ("tool", "ValueError") in errors, errors
    assert {kind for kind, _ in errors} >= {"tool", "llm", "run", "task"}, errors
    stored = json.dumps([(s.error, s.attributes) for s in spans])
    assert "Alice" not in stored and "Elm St" not in stored
    assert all(error.isidentifier() for _, error in errors), errors


async def test_with_tracing_off_no_span_is_written(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    result, spans = await run_the_task(tmp_path, openai_server, tracing=False)
    assert result.status is TaskStatus.SUCCEEDED and spans == []


def test_a_crash_mid_task_leaves_the_spans_written_so_far_readable(tmp_path: Path) -> None:
    config = config_in(tmp_path, crash_at="r2", dedupe=True, steps=3)
    host = start_host(config)
    assert host.wait(timeout=60) == -9  # it killed itself inside the second tool call
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_")},
        "AGENT_DATA_DIR": config["data_dir"],
        "AGENT_RECOVERY": "off",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }

    def trace(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "core_agent", "trace", "last", *extra],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    shown = json.loads(trace("--json"))
    assert shown["status"] == "running"  # left as the process died
    spans = shown["spans"]
    kinds = [s["kind"] for s in spans]
    # The route, both model turns and the first call (with its policy decision) were durable;
    # the root and the run end with the task, so they are not there yet.
    assert "task" not in kinds and "run" not in kinds
    assert kinds.count("llm") == 2 and "planning" in kinds
    (tool_span,) = [s for s in spans if s["kind"] == "tool"]
    assert tool_span["attributes"]["result"] == "effect r1 recorded"
    tree = trace()
    assert "tool effect" in tree and "llm" in tree
