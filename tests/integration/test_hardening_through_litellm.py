"""ReAct hardening and structured output with litellm against the loopback OpenAI server."""

import pytest
from pydantic import BaseModel

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.tooling.registry import ToolRegistry
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio
fetched: list[str] = []


@tool(capabilities={"read"}, idempotent=True)
def fetch(key: str) -> str:
    """Fetch a record by key."""
    fetched.append(key)
    return f"record {key}"


@tool
def dump() -> str:
    """Return a huge document."""
    return "HEAD-" + "x" * 30_000 + "-TAIL"


@tool
def broken(n: int) -> str:
    """Always fails."""
    raise RuntimeError(f"backend down ({n})")


@pytest.fixture
def kernel(litellm_settings):
    container = KernelContainer()
    container.settings.override(litellm_settings.model_copy(update={"max_observation_chars": 2000}))
    container.tool_registry.override(ToolRegistry([fetch, dump, broken]))
    return container.kernel()


def tool_contents(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_loop_detection(kernel, openai_server) -> None:
    fetched.clear()
    for _ in range(2):
        openai_server.reply(None, tool_calls=[{"name": "fetch", "arguments": {"key": "k"}}])
    openai_server.reply("done")
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="get k", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert fetched == ["k"]
    assert (
        "already called fetch with exactly these arguments"
        in tool_contents(openai_server.requests[2])[-1]
    )


async def test_truncation(kernel, openai_server) -> None:
    openai_server.reply(None, tool_calls=[{"name": "dump", "arguments": {}}])
    openai_server.reply("ok")
    async with kernel:
        await kernel.execute_task(TaskRequest(task="dump", force_mode="react"))
    observed = tool_contents(openai_server.requests[1])[-1]
    assert len(observed) <= 2000
    assert observed.startswith("HEAD-") and observed.endswith("-TAIL")
    assert "characters truncated" in observed


async def test_error_streak_warning(kernel, openai_server) -> None:
    for n in range(3):
        openai_server.reply(None, tool_calls=[{"name": "broken", "arguments": {"n": n}}])
    openai_server.reply("I could not do it.")
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="try", force_mode="react"))
    assert result.output == "I could not do it."
    last = openai_server.requests[3]["messages"][-1]
    assert last["role"] == "user" and "last 3 tool calls failed" in last["content"]


class Contact(BaseModel):
    name: str
    email: str
    age: int


async def test_structured_output_repair_and_self_correction(kernel, openai_server) -> None:
    openai_server.reply("```json\n{name: 'Ada', email: 'ada@example.org',}\n```")  # no age
    openai_server.reply("{'name': 'Ada', 'email': 'ada@example.org', 'age': 36,}")
    async with kernel:
        contact = await kernel.execute_task(
            TaskRequest(task="Extract the contact."), response_model=Contact
        )
    assert contact == Contact(name="Ada", email="ada@example.org", age=36)
    first, second = openai_server.requests
    assert any(t["function"]["name"] == "final_answer" for t in first["tools"])
    assert "age: Field required" in second["messages"][-1]["content"]
