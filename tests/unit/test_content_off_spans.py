"""With AGENT_TRACE_CONTENT=false no step's content reaches a span, whoever wrote it.

Reviewer's cases: a provider's error quoting the prompt in the plan-and-execute fallback's
``reason``/``failures``, a cancel's reason on the task span, a tool name the model made up
as a span's name and in the ``llm`` span's ``tool_calls``, a hook's reason and
``hook_errors``. The store keeps only attributes known to be free of content, so an
attribute a writer forgets to check is dropped too.
"""

import ast
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import core_agent
from core_agent import HookVerdict, ToolHook, create_kernel, tool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool_hook import ToolHookContext
from core_agent.contracts.trace_store import (
    CONTENT_ATTRIBUTES,
    CONTENT_FREE_ATTRIBUTES,
    COUNTED_ATTRIBUTES,
    UNKNOWN_TOOL,
    Span,
    TraceRecording,
)
from core_agent.observability.recording_store import RecordingTraceStore
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import TaskRequest, TaskStatus, ToolCall, ToolResult
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio
PRIVATE = "Bob Jones, card 4111111111111111"


@tool(capabilities={"write"})
def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    return "noted"


class Gatekeeper(ToolHook):
    """Blocks every call, quoting its arguments; fails after one, quoting them too."""

    name = "gatekeeper"

    async def before_call(self, call: ToolCall, context: ToolHookContext) -> HookVerdict | None:
        if "block" in str(call.arguments):
            return HookVerdict.block(f"no notes about {call.arguments}")
        return None

    async def after_call(
        self, call: ToolCall, result: ToolResult, context: ToolHookContext
    ) -> None:
        raise ValueError(f"could not audit {call.arguments}")


@pytest.fixture
def kernel_for(container, tmp_path):
    def build(*turns, hooks=(), **fields):
        container.settings.override(
            AgentSettings(data_dir=tmp_path / "data", trace_content=False, **fields)
        )
        traces = FakeTraceStore()
        container.task_store.override(FakeTaskStore())
        container.trace_store.override(traces)
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([note]))
        container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
        kernel = container.kernel()
        for hook in hooks:
            kernel.add_tool_hook(hook)
        return kernel, traces

    return build


def settings_for(tmp_path: Path, server: OpenAIServer) -> AgentSettings:
    return AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/local",
        model_api_base=server.base_url,
        model_api_key="sk-test",
        model_max_retries=0,
        trace_content=False,
    )


def stored(traces: FakeTraceStore, task_id: str) -> str:
    return json.dumps(
        [(s.name, s.error, s.attributes) for s in traces.spans if s.task_id == task_id],
        default=str,
    )


async def test_a_planning_error_quoting_the_prompt_stays_out_of_the_fallback_span(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    settings = settings_for(tmp_path, openai_server)
    openai_server.reply(status=400, error_message=f"Bad prompt: 'who is {PRIVATE}?'")
    openai_server.reply("fallback answer")
    async with create_kernel(settings) as kernel:
        result = await kernel.execute_task(
            TaskRequest(task="who is Bob", force_mode="plan_execute")
        )
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    (fallback,) = [s for s in spans if s.name == "fallback_react"]
    assert "Bob Jones" not in json.dumps([(s.name, s.error, s.attributes) for s in spans])
    assert fallback.attributes["failures"] == 1 and "reason" not in fallback.attributes


async def test_a_plans_success_criteria_and_tool_hints_stay_out_of_the_planning_span(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    step = {
        "id": "s1",
        "goal": f"look up {PRIVATE}",
        "depends_on": [],
        "tool_hints": ["Carol_Diaz_salary_95000"],
        "success_criterion": f"the record of {PRIVATE} is found",
    }
    openai_server.reply(json.dumps({"steps": [step]}))
    openai_server.reply("found it")
    openai_server.reply("the answer")
    async with create_kernel(settings_for(tmp_path, openai_server)) as kernel:
        result = await kernel.execute_task(
            TaskRequest(task="who is Bob", force_mode="plan_execute")
        )
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    (planning,) = [s for s in spans if s.name == "plan"]
    assert planning.attributes["steps"] == [{"id": "s1", "depends_on": []}]
    text = json.dumps([(s.name, s.error, s.attributes) for s in spans])
    assert "Bob Jones" not in text and "Carol" not in text


async def test_a_cancel_reason_stays_out_of_the_task_span(kernel_for) -> None:
    kernel, traces = kernel_for(
        ScriptedTurn(tool_calls=[ScriptedToolCall(name="note", arguments={"text": "x"})]),
        policy_approval_required_risk="low",
    )
    waiting = await kernel.execute_task(TaskRequest(task="note", force_mode="react"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    await kernel.cancel_task(waiting.task_id, "Eve Miller (SSN 219-09-9999) withdrew consent")
    (root,) = [s for s in traces.spans if s.kind == "task"]
    assert root.attributes["task_status"] == "canceled"
    assert "Eve Miller" not in stored(traces, waiting.task_id)


async def test_a_tool_name_the_model_made_up_is_not_a_span_name(kernel_for) -> None:
    kernel, traces = kernel_for(
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall(name="Carol_Diaz_salary_95000", arguments={}),
                ScriptedToolCall(name="note", arguments={"text": "x"}),
            ]
        ),
        ScriptedTurn(content="ok"),
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert "Carol" not in stored(traces, result.task_id)
    assert sorted(s.name for s in traces.spans if s.kind == "tool") == ["note", UNKNOWN_TOOL]
    first_call = next(s for s in traces.spans if s.kind == "llm")
    assert first_call.attributes["tool_calls"] == [UNKNOWN_TOOL, "note"]


async def test_a_hooks_reasons_stay_out_of_the_spans(kernel_for) -> None:
    kernel, traces = kernel_for(
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall(name="note", arguments={"text": f"block {PRIVATE}"}),
                ScriptedToolCall(name="note", arguments={"text": f"keep {PRIVATE}"}),
            ]
        ),
        ScriptedTurn(content="ok"),
        hooks=[Gatekeeper()],
    )
    result = await kernel.execute_task(TaskRequest(task="x", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert "Bob Jones" not in stored(traces, result.task_id)
    tools = [s for s in traces.spans if s.kind == "tool"]
    assert [s.attributes.get("hook_blocked") for s in tools].count("gatekeeper") == 1
    assert [s.attributes.get("hook_errors") for s in tools] == [1, 1]


async def test_the_store_keeps_only_attributes_free_of_content_whoever_wrote_them() -> None:
    # A writer that forgets to check ``tracer.content``: the store still keeps content out.
    inner = FakeTraceStore()
    store = RecordingTraceStore(inner, TraceRecording(content=False))
    now = datetime.now(UTC)
    await store.record(
        Span(
            span_id="s",
            trace_id="t" * 32,
            task_id="task",
            kind="tool",
            name="note",
            started_at=now,
            ended_at=now,
            error=f"quoted {PRIVATE}",
            attributes={
                "call_id": "c1",
                "reason": PRIVATE,
                "a_new_attribute": PRIVATE,
                "failures": [PRIVATE],
                "hook_errors": 2,
                "error_type": f"{PRIVATE}",
                "result": PRIVATE,
            },
        )
    )
    (kept,) = inner.spans
    assert kept.attributes == {"call_id": "c1", "hook_errors": 2}
    assert kept.error == "error"


SRC = Path(core_agent.__file__).parent
CONTENT_ONLY = frozenset({"reason", "feedback", "goal"})
"""Attributes the kernel writes with content recording only, not in ``CONTENT_ATTRIBUTES``
(whose names the views show as content): the store drops them without it anyway."""
DYNAMIC = {
    # (file, the names it writes by a computed key)
    "kernel/task_driver.py": {"cache_read_tokens", "reasoning_tokens"},
    "observability/tracer.py": {"cache_read_tokens", "reasoning_tokens"},
    "orchestration/model_call.py": {"status_code", "retry_after_s", "wait_s"},
    "kernel/session_conversations.py": {"cache_read_tokens", "reasoning_tokens"},
}


def _is_attributes(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "attributes") or (
        isinstance(node, ast.Name) and node.id == "attributes"
    )


def _keys(node: ast.AST) -> set[str]:
    return {
        key.value
        for found in ast.walk(node)
        if isinstance(found, ast.Dict)
        for key in found.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    }


def written_attribute_names() -> tuple[set[str], set[str]]:
    """Every span attribute name the kernel's code writes, and the files writing computed ones."""
    names: set[str] = set()
    computed: set[str] = set()
    for path in SRC.rglob("*.py"):
        where = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Store)
                and _is_attributes(node.value)
            ):
                if isinstance(node.slice, ast.Constant):
                    names.add(node.slice.value)
                else:
                    computed.add(where)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and _is_attributes(node.func.value)
                and node.func.attr in ("update", "setdefault")
            ):
                names.update(kw.arg for kw in node.keywords if kw.arg)
                for arg in node.args[:1]:
                    if isinstance(arg, ast.Constant):
                        names.add(arg.value)
                    elif isinstance(arg, ast.Dict):
                        names.update(_keys(arg))
                    else:
                        computed.add(where)
            elif isinstance(node, ast.keyword) and node.arg == "attributes":
                names.update(_keys(node.value))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(_is_attributes(t) for t in targets) and node.value is not None:
                    names.update(_keys(node.value))
    return names, computed


def test_every_attribute_the_kernel_writes_is_known_to_be_content_or_not() -> None:
    names, computed = written_attribute_names()
    assert len(names) > 50  # the walk found the writers
    assert computed <= set(DYNAMIC), f"a computed attribute name: list it in DYNAMIC {computed}"
    names |= {name for where in computed for name in DYNAMIC[where]}
    known = CONTENT_FREE_ATTRIBUTES | CONTENT_ATTRIBUTES | COUNTED_ATTRIBUTES | CONTENT_ONLY
    assert not names - known, (
        f"classify {sorted(names - known)}: CONTENT_FREE_ATTRIBUTES if free of content "
        "(kept without content recording), else dropped without it"
    )
    assert not CONTENT_FREE_ATTRIBUTES & (CONTENT_ATTRIBUTES | COUNTED_ATTRIBUTES | CONTENT_ONLY)
