"""The rows a task's spans leave in ``agent_traces``, column by column.

A known task on the real kernel and SQLite stores (scripted model): a tool call whose
arguments hold a key, a result holding another and a value matched by a user pattern that
only matches a whole text (``^...$``), a result longer than the cap, a tool that fails with a
key in its error. The rows are read straight from the table and compared, ids and timestamps
aside, with what the kernel wrote before the span write path was made cheaper: kinds,
names, parents, status, tokens, errors and attributes (content, redacted, then cut). The
readers (``trace``, replay, stats, the viewer, the OTLP export) read these rows.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from providers.sqlite.database import sqlite_driver
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio

KEY = "sk-proj-" + "Rt5" * 10
PIN = "PIN4821"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")
LONG = "word " * 50


@tool
def lookup(query: str, token: str) -> str:
    """Look something up with a token.

    Args:
        query: What to look up.
        token: The token to use.
    """
    return f"found {query} with {token}"


@tool
def pin() -> str:
    """The current PIN."""
    return PIN


@tool
def essay() -> str:
    """A long text."""
    return LONG


@tool
def broken(key: str) -> str:
    """Fails.

    Args:
        key: A key.
    """
    raise RuntimeError(f"refused key {key}")


def call(name: str, **arguments: Any) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


async def run_known_task(tmp_path: Path, patterns: tuple[str, ...]) -> tuple[Any, Path]:
    container = KernelContainer()
    container.settings.override(
        AgentSettings(
            data_dir=tmp_path / "data", trace_content_max_chars=100, redact_patterns=patterns
        )
    )
    container.tool_registry.override(ToolRegistry([lookup, pin, essay, broken]))
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [
                call("lookup", query="deploy day", token=KEY),
                call("pin"),
                call("essay"),
                call("broken", key=KEY),
                ScriptedTurn(content="done"),
            ]
        )
    )
    kernel = container.kernel()
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="look it up", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    return result, tmp_path / "data" / "core_agent.db"


def stored_rows(path: Path, task_id: str, *, pin_redacted: bool) -> list[dict[str, Any]]:
    """The task's rows in insertion order, ids replaced by the row that holds them."""
    with sqlite_driver().connect(str(path)) as conn:
        conn.row_factory = sqlite_driver().Row
        rows = [
            dict(row)
            for row in conn.execute(
                "SELECT * FROM agent_traces WHERE task_id = ? ORDER BY rowid", (task_id,)
            )
        ]
    labels = {row["id"]: f"{row['kind']}#{n}" for n, row in enumerate(rows)}
    assert KEY not in repr(rows)
    assert (PIN in repr(rows)) is not pin_redacted
    kept = []
    for row in rows:
        assert ISO.match(row["started_at"]) and ISO.match(row["ended_at"]), row
        started = datetime.fromisoformat(row["started_at"])
        ended = datetime.fromisoformat(row["ended_at"])
        assert row["latency_ms"] == (ended - started).total_seconds() * 1000.0
        assert started <= ended
        payload = json.loads(row["payload_json"])
        assert payload.pop("session_id")
        if row["kind"] == "tool":  # the sandbox of this machine
            assert payload.pop("confinement")
        kept.append(
            {
                "kind": row["kind"],
                "span": row["span"],
                "parent": labels.get(row["parent_id"], row["parent_id"]),
                "status": row["status"],
                "tokens": (row["token_in"], row["token_out"], row["cost_usd"]),
                "error": row["error_text"],
                "payload": payload,
            }
        )
    return kept


@pytest.mark.parametrize("patterns", [(rf"^{PIN}$",), ()], ids=["user pattern", "none"])
async def test_a_known_task_leaves_the_same_rows(tmp_path: Path, patterns: tuple[str, ...]) -> None:
    result, path = await run_known_task(tmp_path, patterns)
    rows = stored_rows(path, result.task_id, pin_redacted=bool(patterns))
    expected = copy.deepcopy(EXPECTED)
    if not patterns:  # the PIN, the whole of its tool's result, matches no built-in format
        expected[7]["payload"]["result"] = PIN
        expected[8]["payload"]["input_messages"][0]["content"] = PIN
    assert rows == expected


EXPECTED: list[dict[str, Any]] = [
    {
        "kind": "planning",
        "span": "route",
        "parent": "task#16",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "strategy": "react",
            "reason": "forced by the request (force_mode=react)",
            "forced": True,
            "features": {
                "sub_goals": 1,
                "dependencies": 0,
                "list_items": 0,
                "context_tokens": 3,
                "tools_available": 4,
                "likely_tools": ["lookup"],
                "risk": "low",
                "clauses": ["look it up"],
            },
        },
    },
    {
        "kind": "memory",
        "span": "memory.recall",
        "parent": "task#16",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {"recalled": [], "tainted": [], "query": "look it up", "memories": []},
    },
    {
        "kind": "llm",
        "span": "scripted/demo",
        "parent": "run#15",
        "status": "ok",
        "tokens": (101, 19, 0.0),
        "error": None,
        "payload": {
            "turn": 1,
            "messages_sent": 2,
            "input_messages": [
                {
                    "role": "system",
                    "content": "You are a capable assistant working inside an "
                    "application. Use the available tools when they "
                    "help yo… [292 more characters not recorded]",
                },
                {"role": "user", "content": "look it up"},
            ],
            "input_messages_from": 0,
            "attempts": 1,
            "finish_reason": "tool_calls",
            "tool_calls": ["lookup"],
            "output_message": {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1_1",
                        "name": "lookup",
                        "arguments": '{"query": "deploy day", "token": "[REDACTED]"}',
                    }
                ],
            },
        },
    },
    {
        "kind": "policy",
        "span": "lookup",
        "parent": "tool#4",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "call_id": "call_1_1",
            "risk": "low",
            "rule": "default:capabilities(none)",
            "denied": False,
            "approval_required": False,
            "tainted": False,
            "reason": "graded by declared capabilities",
            "unproven": [],
            "network": False,
        },
    },
    {
        "kind": "tool",
        "span": "lookup",
        "parent": "run#15",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "call_id": "call_1_1",
            "arguments": '{"query": "deploy day", "token": "[REDACTED]"}',
            "result": "found deploy day with [REDACTED]",
        },
    },
    {
        "kind": "llm",
        "span": "scripted/demo",
        "parent": "run#15",
        "status": "ok",
        "tokens": (136, 1, 0.0),
        "error": None,
        "payload": {
            "turn": 2,
            "messages_sent": 4,
            "input_messages": [
                {
                    "role": "tool",
                    "content": "found deploy day with [REDACTED]",
                    "tool_call_id": "call_1_1",
                    "name": "lookup",
                }
            ],
            "input_messages_from": 3,
            "attempts": 1,
            "finish_reason": "tool_calls",
            "tool_calls": ["pin"],
            "output_message": {
                "role": "assistant",
                "tool_calls": [{"id": "call_2_1", "name": "pin", "arguments": "{}"}],
            },
        },
    },
    {
        "kind": "policy",
        "span": "pin",
        "parent": "tool#7",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "call_id": "call_2_1",
            "risk": "low",
            "rule": "default:capabilities(none)",
            "denied": False,
            "approval_required": False,
            "tainted": False,
            "reason": "graded by declared capabilities",
            "unproven": [],
            "network": False,
        },
    },
    {
        "kind": "tool",
        "span": "pin",
        "parent": "run#15",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {"call_id": "call_2_1", "arguments": "{}", "result": "[REDACTED]"},
    },
    {
        "kind": "llm",
        "span": "scripted/demo",
        "parent": "run#15",
        "status": "ok",
        "tokens": (139, 1, 0.0),
        "error": None,
        "payload": {
            "turn": 3,
            "messages_sent": 6,
            "input_messages": [
                {"role": "tool", "content": "[REDACTED]", "tool_call_id": "call_2_1", "name": "pin"}
            ],
            "input_messages_from": 5,
            "attempts": 1,
            "finish_reason": "tool_calls",
            "tool_calls": ["essay"],
            "output_message": {
                "role": "assistant",
                "tool_calls": [{"id": "call_3_1", "name": "essay", "arguments": "{}"}],
            },
        },
    },
    {
        "kind": "policy",
        "span": "essay",
        "parent": "tool#10",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "call_id": "call_3_1",
            "risk": "low",
            "rule": "default:capabilities(none)",
            "denied": False,
            "approval_required": False,
            "tainted": False,
            "reason": "graded by declared capabilities",
            "unproven": [],
            "network": False,
        },
    },
    {
        "kind": "tool",
        "span": "essay",
        "parent": "run#15",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "call_id": "call_3_1",
            "arguments": "{}",
            "result": "word word word word word word word word word word word word word word "
            "word word word word word word … [150 more characters not recorded]",
        },
    },
    {
        "kind": "llm",
        "span": "scripted/demo",
        "parent": "run#15",
        "status": "ok",
        "tokens": (203, 13, 0.0),
        "error": None,
        "payload": {
            "turn": 4,
            "messages_sent": 8,
            "input_messages": [
                {
                    "role": "tool",
                    "content": "word word word word word word word word word "
                    "word word word word word word word word word "
                    "word word … [150 more characters not recorded]",
                    "tool_call_id": "call_3_1",
                    "name": "essay",
                }
            ],
            "input_messages_from": 7,
            "attempts": 1,
            "finish_reason": "tool_calls",
            "tool_calls": ["broken"],
            "output_message": {
                "role": "assistant",
                "tool_calls": [
                    {"id": "call_4_1", "name": "broken", "arguments": '{"key": "[REDACTED]"}'}
                ],
            },
        },
    },
    {
        "kind": "policy",
        "span": "broken",
        "parent": "tool#13",
        "status": "ok",
        "tokens": (None, None, None),
        "error": None,
        "payload": {
            "call_id": "call_4_1",
            "risk": "low",
            "rule": "default:capabilities(none)",
            "denied": False,
            "approval_required": False,
            "tainted": False,
            "reason": "graded by declared capabilities",
            "unproven": [],
            "network": False,
        },
    },
    {
        "kind": "tool",
        "span": "broken",
        "parent": "run#15",
        "status": "error",
        "tokens": (None, None, None),
        "error": "Error: tool 'broken' failed: RuntimeError: refused key [REDACTED]",
        "payload": {
            "call_id": "call_4_1",
            "arguments": '{"key": "[REDACTED]"}',
            "error_type": "ToolExecutionError",
            "result": "Error: tool 'broken' failed: RuntimeError: refused key [REDACTED]",
        },
    },
    {
        "kind": "llm",
        "span": "scripted/demo",
        "parent": "run#15",
        "status": "ok",
        "tokens": (240, 1, 0.0),
        "error": None,
        "payload": {
            "turn": 5,
            "messages_sent": 10,
            "input_messages": [
                {
                    "role": "tool",
                    "content": "Error: tool 'broken' failed: RuntimeError: refused key [REDACTED]",
                    "tool_call_id": "call_4_1",
                    "name": "broken",
                    "is_error": True,
                }
            ],
            "input_messages_from": 9,
            "attempts": 1,
            "finish_reason": "stop",
            "tool_calls": [],
            "output_message": {"role": "assistant", "content": "done"},
        },
    },
    {
        "kind": "run",
        "span": "run",
        "parent": "task#16",
        "status": "ok",
        "tokens": (819, 35, 0.0),
        "error": None,
        "payload": {"strategy": "react"},
    },
    {
        "kind": "task",
        "span": "task",
        "parent": None,
        "status": "ok",
        "tokens": (819, 35, 0.0),
        "error": None,
        "payload": {"task_status": "succeeded", "strategy": "react"},
    },
]
