"""A local OpenAI-compatible server just works: no key needed, libraries loaded ahead."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core_agent.contracts.llm_gateway import LLMRequest
from core_agent.contracts.settings import PLACEHOLDER_API_KEY
from providers.litellm_gateway import LiteLLMGateway
from shared.agent_protocol import UserMessage
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio

SRC = Path(__file__).resolve().parents[2] / "src"


async def test_a_server_at_api_base_is_called_without_a_key(
    openai_server: OpenAIServer, monkeypatch
) -> None:
    # Without a key litellm's client refuses to send anything ("Missing credentials").
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    gateway = LiteLLMGateway("openai/local-model", api_base=openai_server.base_url)
    openai_server.reply("hello from the local server")
    response = await gateway.complete(LLMRequest(messages=[UserMessage(content="hi")]))
    assert response.message.content == "hello from the local server"
    assert openai_server.authorizations == [f"Bearer {PLACEHOLDER_API_KEY}"]


async def test_a_key_in_the_environment_is_sent_instead_of_the_placeholder(
    openai_server: OpenAIServer, monkeypatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    gateway = LiteLLMGateway("openai/local-model", api_base=openai_server.base_url)
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
