"""Agent files: what each key sets, which layer wins, and where a mistake is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core_agent import create_kernel
from core_agent.agent_files import AgentDefinition, AgentFileError, load_agent_file
from core_agent.container import KernelContainer, use_agent_file
from core_agent.contracts.errors import ConfigurationError, UsageError
from core_agent.contracts.llm_gateway import LLMRequest
from core_agent.contracts.settings import AgentSettings
from fakes.gateways import FakeRecordingGateway
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedTurn
from shared.agent_protocol import RiskLevel, TaskRequest
from support.bad_agent_files import BAD_AGENT_FILES

README = Path(__file__).resolve().parents[2] / "README.md"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", list(BAD_AGENT_FILES))
def test_a_bad_file_is_refused_with_its_line_and_column(case: str) -> None:
    text, expected = BAD_AGENT_FILES[case]
    write(Path("agent.yaml"), text)  # the test runs in its own tmp_path (conftest)
    with pytest.raises(AgentFileError) as caught:
        load_agent_file("agent.yaml")
    assert str(caught.value) == expected
    assert isinstance(caught.value, ConfigurationError)  # exit 2 on the command line


def test_a_python_tag_builds_nothing() -> None:
    write(Path("agent.yaml"), BAD_AGENT_FILES["python tag"][0])
    with pytest.raises(AgentFileError):
        load_agent_file("agent.yaml")
    assert not Path("pwned").exists()


def test_every_problem_is_kept_and_the_message_counts_the_others() -> None:
    write(
        Path("agent.yaml"),
        "strategy:\n  mode: reactt\n  max_turns: 0\nmemroy: {}\ntools: [calculator]\n",
    )
    with pytest.raises(AgentFileError) as caught:
        load_agent_file("agent.yaml")
    error = caught.value
    assert [(p.line, p.column) for p in error.problems] == [(2, 9), (4, 1)]
    assert str(error).endswith("(and 1 more problem)")
    assert "did you mean 'memory'?" in error.problems[1].message


def test_unreadable_and_oversized_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AgentFileError, match=r"^missing\.yaml: cannot read the agent file"):
        load_agent_file("missing.yaml")
    with pytest.raises(AgentFileError, match="not a file"):
        load_agent_file(tmp_path)
    write(tmp_path / "big.yaml", "description: " + "x" * 1_000_001)
    with pytest.raises(AgentFileError, match="an agent file is a short document"):
        load_agent_file(tmp_path / "big.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(AgentFileError, match=r"latin1\.yaml:1:1: not UTF-8 text"):
        load_agent_file(tmp_path / "latin1.yaml")


def test_deep_nesting_and_alias_bombs_are_refused_without_walking_them() -> None:
    write(Path("deep.yaml"), "tools: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(AgentFileError, match=r"^deep\.yaml: nested more than 32 levels$"):
        load_agent_file("deep.yaml")
    # Each level refers to the one below nine times: 9**9 strings if walked as a tree.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    write(Path("bomb.yaml"), "\n".join([*lines, "tool_sets: {many: *a9}", ""]))
    with pytest.raises(AgentFileError) as caught:
        load_agent_file("bomb.yaml")
    assert str(caught.value).startswith("bomb.yaml:1:1: unknown key 'a0'")


def test_a_file_with_very_many_mistakes_describes_the_first_fifty() -> None:
    write(Path("many.yaml"), "".join(f"key{i}: 1\n" for i in range(500)))
    with pytest.raises(AgentFileError) as caught:
        load_agent_file("many.yaml")
    problems = caught.value.problems
    assert len(problems) == 51
    assert problems[-1].message == "450 more problems not described"


FULL = """\
name: analyst
description: Works out numbers.
model:
  name: openai/gpt-4o-mini
  provider: openai
  api_base: http://localhost:8080/v1
  temperature: 0.3
  timeout_s: 45
  max_retries: 1
  fallbacks: [ollama/llama3.2]
system_prompt_file: prompts/analyst.md
tool_sets:
  maths: [calculator, clock]
  clock: [current_time]
tools: [maths, read_file, calculator]
policy:
  approval_required_risk: medium
  approval_timeout_s: 30
  file: rules/extra.toml
  rules:
    - {name: no-env, effect: deny, paths: ["**/.env"]}
memory:
  namespace: analyst
  knowledge_namespace: reports
  recall_k: 7
  context_max_tokens: 6000
  session_window_tokens: 3000
strategy:
  mode: plan_execute
  max_turns: 5
  max_parallel_tools: 2
  tool_timeout_s: 20
  fallback_max_turns: 4
  plan: {max_steps: 4, max_attempts: 2, max_parallel_steps: 2, step_max_turns: 3, max_replans: 0}
  limits: {input_tokens: 1000, output_tokens: 500, total_tokens: 1200, cost_usd: 0.5,
           tool_calls: 9, wall_time_s: 60}
  session_limits: {input_tokens: 9000, output_tokens: 900, total_tokens: 9900, cost_usd: 2}
"""


def test_every_key_sets_its_setting(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    write(folder / "prompts" / "analyst.md", "You analyse numbers.\n")
    write(folder / "rules" / "extra.toml", '[[rule]]\nname = "x"\ntools = ["grep"]\n')
    agent = load_agent_file(write(folder / "analyst.yaml", FULL))
    settings = agent.apply(AgentSettings(data_dir=tmp_path))

    assert (agent.name, agent.description) == ("analyst", "Works out numbers.")
    assert agent.system_prompt == "You analyse numbers."
    assert [rule.name for rule in agent.policy_rules] == ["no-env"]
    assert settings.model == "openai/gpt-4o-mini"
    assert settings.model_provider == "openai"
    assert settings.model_api_base == "http://localhost:8080/v1"
    assert settings.model_temperature == 0.3
    assert (settings.model_timeout_s, settings.model_max_retries) == (45, 1)
    assert settings.model_fallbacks == ("ollama/llama3.2",)
    # Sets expand in place, nested ones too, and a name given twice is one tool.
    assert settings.tools == ("calculator", "current_time", "read_file")
    assert settings.policy_approval_required_risk is RiskLevel.MEDIUM
    assert settings.approval_timeout_s == 30
    assert settings.policy_file == folder / "rules" / "extra.toml"  # relative to the file
    assert (settings.memory_namespace, settings.knowledge_namespace) == ("analyst", "reports")
    assert settings.memory_recall_k == 7
    assert (settings.context_max_tokens, settings.session_window_tokens) == (6000, 3000)
    assert settings.strategy_mode == "plan_execute"
    assert (settings.max_turns, settings.max_parallel_tools) == (5, 2)
    assert (settings.tool_timeout_s, settings.fallback_max_turns) == (20, 4)
    assert (
        settings.plan_max_steps,
        settings.plan_max_attempts,
        settings.plan_max_parallel_steps,
        settings.plan_step_max_turns,
        settings.plan_max_replans,
    ) == (4, 2, 2, 3, 0)
    assert settings.task_limits.model_dump() == {
        "input_tokens": 1000,
        "output_tokens": 500,
        "total_tokens": 1200,
        "cost_usd": 0.5,
        "tool_calls": 9,
        "wall_time_s": 60,
    }
    assert settings.session_limits.model_dump(exclude_none=True) == {
        "input_tokens": 9000,
        "output_tokens": 900,
        "total_tokens": 9900,
        "cost_usd": 2,
    }
    # What the file does not mention stays as the settings had it.
    assert settings.data_dir == tmp_path
    assert settings.embedder == "hashing"


def test_the_file_wins_over_the_environment_and_explicit_settings_win_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MAX_TURNS", "9")
    monkeypatch.setenv("AGENT_STRATEGY_MODE", "plan_execute")
    monkeypatch.setenv("AGENT_MEMORY_NAMESPACE", "from-env")
    agent = load_agent_file(
        write(tmp_path / "a.yaml", "strategy:\n  mode: react\n  max_turns: 4\n")
    )
    settings = agent.apply(AgentSettings())
    assert (settings.strategy_mode, settings.max_turns) == ("react", 4)
    assert settings.memory_namespace == "from-env"  # not in the file: the environment's

    explicit = agent.with_settings(max_turns=2, model="ollama/llama3.2").apply(AgentSettings())
    assert (explicit.max_turns, explicit.model, explicit.strategy_mode) == (
        2,
        "ollama/llama3.2",
        "react",
    )
    with pytest.raises(UsageError, match="did you mean 'max_turns'"):
        agent.with_settings(max_turn=2)
    with pytest.raises(UsageError, match="max_turns"):
        agent.with_settings(max_turns=0)


def test_recall_on_and_off(tmp_path: Path) -> None:
    off = load_agent_file(write(tmp_path / "off.yaml", "memory: {recall: false}\n"))
    on = load_agent_file(write(tmp_path / "on.yaml", "memory: {recall: true}\n"))
    assert off.apply(AgentSettings(memory_recall_k=5)).memory_recall_k == 0
    assert on.apply(AgentSettings(memory_recall_k=0)).memory_recall_k == 3  # the default
    assert on.apply(AgentSettings(memory_recall_k=5)).memory_recall_k == 5  # kept


async def first_request(tmp_path: Path, agent: AgentDefinition | Path) -> LLMRequest:
    """What the model is sent first when a kernel configured by ``agent`` runs a task."""
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data"))
    use_agent_file(container, agent)
    recorder = FakeRecordingGateway(ScriptedLLMGateway([ScriptedTurn(content="ok")]))
    container.llm_gateway.override(recorder)
    async with container.kernel() as kernel:
        await kernel.execute_task(TaskRequest(task="hello"))
    return recorder.requests[0]


@pytest.mark.anyio
async def test_the_model_gets_the_files_prompt_taken_literally_and_its_tools(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "a.yaml",
        "system_prompt: |\n  Quote prices as $5, never ${price}.\ntools: [current_time]\n",
    )
    request = await first_request(tmp_path, path)
    assert request.messages[0].kind == "system"
    assert request.messages[0].content.startswith("Quote prices as $5, never ${price}.\n")
    assert [tool.name for tool in request.tools] == ["current_time"]


def test_a_tool_that_is_not_installed_is_reported_where_the_file_names_it(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "a.yaml",
        "tool_sets:\n  maths:\n    - calculator\n    - calculater\ntools: [maths]\n",
    )
    with pytest.raises(AgentFileError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path / "data"), agent=path)
    assert str(caught.value) == (
        f"{path}:4:7: no tool named 'calculater' is installed (did you mean 'calculator'?)"
    )


def test_the_scripted_model_script_is_found_next_to_the_file(tmp_path: Path) -> None:
    write(tmp_path / "agents" / "script.json", '[{"content": "hi"}]')
    path = write(
        tmp_path / "agents" / "a.yaml", "model: {gateway: scripted, script: script.json}\n"
    )
    settings = load_agent_file(path).apply(AgentSettings())
    assert settings.scripted_model_script == tmp_path / "agents" / "script.json"
    assert settings.gateway_name == "scripted"

    missing = write(tmp_path / "b.yaml", "model:\n  script: nope.json\n")
    with pytest.raises(AgentFileError, match=r"b\.yaml:2:11: model\.script: no such file"):
        load_agent_file(missing)


def test_a_bad_policy_file_is_reported_at_the_key_that_names_it(tmp_path: Path) -> None:
    write(tmp_path / "rules.toml", '[[rule]]\nname = "x"\nefect = "deny"\n')
    path = write(tmp_path / "a.yaml", "policy:\n  file: rules.toml\n")
    with pytest.raises(AgentFileError) as caught:
        load_agent_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2:9: invalid policy file")
    assert "efect" in message and "\n" not in message


def test_capabilities_are_named_in_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "capabilities: [reader]\n")
    agent = load_agent_file(path)
    assert agent.capabilities == ("reader",)
    assert agent.apply(AgentSettings()).capabilities == ("reader",)


def test_a_capability_that_is_not_installed_is_reported_where_the_file_names_it(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "a.yaml", "name: x\ncapabilities:\n  - reeder\n")
    with pytest.raises(AgentFileError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path / "data"), agent=path)
    assert str(caught.value) == (
        f"{path}:3:5: no capability named 'reeder' is installed (did you mean 'reader'?)"
    )


def readme_agent_file() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Agent files") :]
    match = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert match, "the README's Agent files section has a yaml sample"
    return match.group(1)


def test_the_readme_sample_loads_and_builds_a_kernel(tmp_path: Path) -> None:
    path = write(tmp_path / "researcher.yaml", readme_agent_file())
    agent = load_agent_file(path)
    settings = agent.apply(AgentSettings(data_dir=tmp_path / "data"))
    assert agent.name == "researcher"
    assert settings.tools == ("knowledge_search", "recall", "remember", "calculator", "read_file")
    assert settings.policy_approval_required_risk is RiskLevel.MEDIUM
    assert [rule.name for rule in agent.policy_rules] == ["private-folder"]
    assert (settings.memory_namespace, settings.memory_recall_k) == ("researcher", 5)
    assert (settings.strategy_mode, settings.max_turns, settings.plan_max_steps) == (
        "adaptive",
        8,
        5,
    )
    assert settings.task_limits.tool_calls == 30
    create_kernel(AgentSettings(data_dir=tmp_path / "data"), agent=agent)  # its tools exist


README_MISTAKES = {
    "stratgy": ("strategy:", "stratgy:"),
    "reactt": ("mode: adaptive", "mode: reactt"),
    "got 0": ("max_turns: 8", "max_turns: 0"),
    "calculater": ("calculator, read_file", "calculater, read_file"),
}


def test_the_readme_error_examples_are_what_the_sample_gives(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Agent files") :]
    examples = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert examples
    lines = examples.group(1).strip().splitlines()
    assert len(lines) == len(README_MISTAKES)
    for line in lines:
        (old, new) = next(edit for key, edit in README_MISTAKES.items() if key in line)
        sample = readme_agent_file()
        assert sample.count(old) == 1
        path = write(tmp_path / "researcher.yaml", sample.replace(old, new))
        with pytest.raises(AgentFileError) as caught:
            create_kernel(AgentSettings(data_dir=tmp_path / "data"), agent=path)
        assert str(caught.value) == line.replace("researcher.yaml", str(path))


@pytest.mark.anyio
async def test_a_definition_made_in_code_is_applied_too(tmp_path: Path) -> None:
    agent = AgentDefinition(
        name="inline", source="<code>", settings_updates={"tools": ("calculator",)}
    )
    request = await first_request(tmp_path, agent)
    assert [tool.name for tool in request.tools] == ["calculator"]
