"""An agent file's model, prompt and tools as a real OpenAI-protocol server receives them."""

from pathlib import Path

import pytest

from core_agent import create_kernel
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import TaskRequest, TaskStatus

pytestmark = pytest.mark.anyio


async def test_the_server_sees_the_files_model_prompt_temperature_and_tools(
    tmp_path: Path, openai_server
) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        "name: travel\n"
        "model:\n"
        "  name: openai/travel-model\n"
        f"  api_base: {openai_server.base_url}\n"
        "  temperature: 0.25\n"
        "  max_retries: 0\n"
        "system_prompt: You plan trips to Lisbon.\n"
        "tool_sets:\n"
        "  planning: [calculator, current_time]\n"
        "tools: [planning]\n",
        encoding="utf-8",
    )
    openai_server.reply("Take the 28 tram.")
    # The key stays in the settings (the environment, here given in code), never in the file;
    # and the server is the file's choice, so it is not sent there (the file is not trusted).
    base = AgentSettings(
        data_dir=tmp_path / "data", model="openai/other-model", model_api_key="sk-test"
    )

    async with create_kernel(base, agent=agent) as kernel:
        result = await kernel.execute_task(TaskRequest(task="How do I get to Alfama?"))

    assert result.status is TaskStatus.SUCCEEDED
    assert result.output == "Take the 28 tram."
    body = openai_server.requests[0]
    assert body["model"] == "travel-model"  # the file's, not the settings'
    assert openai_server.authorizations == ["Bearer no-key-required"]
    assert body["temperature"] == 0.25
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You plan trips to Lisbon.\n")
    assert sorted(tool["function"]["name"] for tool in body["tools"]) == [
        "calculator",
        "current_time",
    ]
