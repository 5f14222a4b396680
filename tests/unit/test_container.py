import pytest

from core_agent.container import (
    LLM_GATEWAYS,
    TOOLS,
    KernelContainer,
    create_kernel,
    installed_providers,
)
from core_agent.contracts.errors import ModelNotConfiguredError, ProviderNotFoundError
from core_agent.contracts.settings import AgentSettings
from fakes.stores import (
    FakeCheckpointStore,
    FakeMemoryStore,
    FakeTaskStore,
    FakeToolCallLedger,
    FakeTraceStore,
)
from providers.scripted_gateway import ScriptedLLMGateway

pytestmark = pytest.mark.anyio


def test_builtin_providers_are_registered_by_entry_point() -> None:
    assert {"litellm", "scripted"} <= set(installed_providers(LLM_GATEWAYS))
    assert {"calculator", "current_time"} <= set(installed_providers(TOOLS))


@pytest.mark.parametrize(
    ("field", "value", "group"),
    [
        ("llm_gateway", "gpt5000", "core_agent.llm_gateways"),
        ("task_store", "postgres", "core_agent.task_stores"),
        ("trace_store", "jaeger", "core_agent.trace_stores"),
    ],
)
def test_an_unknown_provider_fails_at_start_up_listing_installed_names(
    tmp_path, field: str, value: str, group: str
) -> None:
    with pytest.raises(ProviderNotFoundError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path, **{field: value}))
    assert caught.value.group == group
    assert caught.value.installed == installed_providers(group)
    assert repr(value) in str(caught.value)
    for name in installed_providers(group):
        assert name in str(caught.value)


def test_unknown_tool_names_in_settings_are_listed_too(tmp_path) -> None:
    with pytest.raises(ProviderNotFoundError, match="calculator"):
        create_kernel(AgentSettings(data_dir=tmp_path, tools="calculator,teleport"))


def test_tools_setting_reads_a_comma_separated_variable(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AGENT_TOOLS", "calculator, current_time")
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path))
    assert AgentSettings().tools == ("calculator", "current_time")


def test_litellm_without_a_model_explains_how_to_configure_one(tmp_path) -> None:
    with pytest.raises(ModelNotConfiguredError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path, llm_gateway="litellm"))
    message = str(caught.value)
    assert "AGENT_MODEL" in message
    assert "ollama/" in message
    assert "AGENT_MODEL_API_BASE" in message


def test_gateway_follows_the_model_setting(tmp_path) -> None:
    assert AgentSettings(data_dir=tmp_path).gateway_name == "scripted"
    assert AgentSettings(data_dir=tmp_path, model="ollama/llama3.2").gateway_name == "litellm"
    settings = AgentSettings(data_dir=tmp_path, model="llama3.2", model_provider="ollama")
    assert settings.resolved_model == "ollama/llama3.2"


async def test_adapters_are_swapped_through_the_container(settings) -> None:
    container = KernelContainer()
    container.settings.override(settings)
    tasks, traces = FakeTaskStore(), FakeTraceStore()
    container.task_store.override(tasks)
    container.trace_store.override(traces)
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    memory = FakeMemoryStore()
    container.memory_store.override(memory)
    container.llm_gateway.override(ScriptedLLMGateway())
    kernel = container.kernel()
    from shared.agent_protocol import TaskRequest

    result = await kernel.execute_task(TaskRequest(task="2 + 2"))
    assert memory.searches == ["2 + 2"]
    assert result.output == "2 + 2 = 4"
    assert tasks.tasks[result.task_id].status.value == "succeeded"
    assert {s.kind for s in traces.spans} == {
        "planning",
        "memory",
        "task",
        "run",
        "llm",
        "tool",
        "policy",
    }
    assert not (settings.data_dir / "core_agent.db").exists()


async def test_the_model_classifier_is_wired_by_setting(settings) -> None:
    from providers.scripted_gateway import ScriptedTurn
    from shared.agent_protocol import TaskRequest

    container = KernelContainer()
    container.settings.override(settings.model_copy(update={"router_classifier": "model"}))
    container.task_store.override(FakeTaskStore())
    container.trace_store.override(FakeTraceStore())
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    container.llm_gateway.override(
        ScriptedLLMGateway([ScriptedTurn(content='{"sub_goals": 1, "dependent": false}')])
    )
    decision = await container.kernel().route(TaskRequest(task="Do it, then the rest."))
    assert decision.features["classifier"] == "model"
    assert decision.strategy == "react"
