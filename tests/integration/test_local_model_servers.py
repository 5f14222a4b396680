"""A local OpenAI-compatible server just works: no key needed, libraries loaded ahead."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core_agent.contracts.llm_gateway import LLMRequest
from core_agent.contracts.settings import PLACEHOLDER_API_KEY
from providers.litellm_gateway import LiteLLMGateway
from providers.openai_http_gateway import OpenAIHttpGateway
from shared.agent_protocol import UserMessage
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

SRC = Path(__file__).resolve().parents[2] / "src"


GATEWAYS = pytest.mark.parametrize(
    "gateway_type", [LiteLLMGateway, OpenAIHttpGateway], ids=["litellm", "openai_http"]
)


@GATEWAYS
async def test_a_server_at_api_base_is_called_without_a_key(
    openai_server: OpenAIServer, monkeypatch, gateway_type
) -> None:
    # Without a key litellm's client refuses to send anything ("Missing credentials").
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    gateway = gateway_type("openai/local-model", api_base=openai_server.base_url)
    openai_server.reply("hello from the local server")
    response = await gateway.complete(LLMRequest(messages=[UserMessage(content="hi")]))
    assert response.message.content == "hello from the local server"
    assert openai_server.authorizations == [f"Bearer {PLACEHOLDER_API_KEY}"]


@GATEWAYS
async def test_a_key_in_the_environment_is_sent_instead_of_the_placeholder(
    openai_server: OpenAIServer, monkeypatch, gateway_type
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    gateway = gateway_type("openai/local-model", api_base=openai_server.base_url)
    openai_server.reply("ok")
    await gateway.complete(LLMRequest(messages=[UserMessage(content="hi")]))
    assert openai_server.authorizations == ["Bearer sk-from-the-environment"]


def test_warm_up_loads_what_the_first_request_would_load() -> None:
    # A fresh interpreter: in this one earlier tests have loaded everything already.
    code = (
        "import sys\n"
        "from providers.litellm_gateway import LiteLLMGateway\n"
        "assert 'litellm' not in sys.modules\n"
        "LiteLLMGateway('openai/m', api_base='http://127.0.0.1:9/v1').warm_up()\n"
        "missing = [m for m in ('litellm', 'openai.resources.chat') if m not in sys.modules]\n"
        "assert not missing, missing\n"
    )
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_a_task_against_a_local_server_never_imports_litellm(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    # Importing litellm takes seconds, longer than a local server's whole first answer: a
    # model at a base URL is reached over plain HTTP, and nothing else pulls litellm in.
    openai_server.reply("streamed from the local server")
    code = (
        "import sys, anyio\n"
        "from core_agent import create_kernel\n"
        "from shared.agent_protocol import TaskRequest\n"
        "async def main():\n"
        "    async with create_kernel() as kernel:\n"
        "        result = await kernel.execute_task(TaskRequest(task='say hi'))\n"
        "        print(result.status.value, result.output)\n"
        "anyio.run(main)\n"
        "print('litellm' in sys.modules)\n"
    )
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "AGENT_DATA_DIR": str(tmp_path / "data"),
        "AGENT_MODEL": "openai/local-model",
        "AGENT_MODEL_API_BASE": openai_server.base_url,
    }
    env.pop("AGENT_LLM_GATEWAY", None)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["succeeded streamed from the local server", "False"]
    assert len(openai_server.requests) == 1
