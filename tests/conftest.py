from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_agent.container import KernelContainer
from core_agent.contracts.settings import AgentSettings
from support.openai_server import OpenAIServer

# No test may reach the network: litellm reads its bundled price table.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env file is read


@pytest.fixture
def settings(tmp_path: Path) -> AgentSettings:
    return AgentSettings(data_dir=tmp_path / "data", model_max_retries=0)


@pytest.fixture
def container(settings: AgentSettings) -> KernelContainer:
    container = KernelContainer()
    container.settings.override(settings)
    return container


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def litellm_settings(tmp_path: Path, openai_server: OpenAIServer) -> AgentSettings:
    return AgentSettings(
        data_dir=tmp_path / "data",
        model="openai/test-model",
        model_api_base=openai_server.base_url,
        model_api_key="sk-test",
        # The openai/-at-a-base-URL default would be the plain HTTP gateway: these settings
        # are for tests of litellm's real client code.
        llm_gateway="litellm",
        model_max_retries=0,
        model_timeout_s=20,
    )
