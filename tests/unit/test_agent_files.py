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
    # The file's rules, then its policy file's (relative to the file).
    assert [rule.name for rule in agent.policy_rules] == ["no-env", "x"]
    assert settings.model == "openai/gpt-4o-mini"
    assert settings.model_provider == "openai"
    assert settings.model_api_base == "http://localhost:8080/v1"
    assert settings.model_api_key is not None  # the placeholder: the file chose the server
    assert settings.model_api_key.get_secret_value() == "no-key-required"
    assert settings.model_temperature == 0.3
    assert (settings.model_timeout_s, settings.model_max_retries) == (45, 1)
    assert settings.model_fallbacks == ("ollama/llama3.2",)
    # Sets expand in place, nested ones too, and a name given twice is one tool.
    assert settings.tools == ("calculator", "current_time", "read_file")
    assert settings.policy_approval_required_risk is RiskLevel.MEDIUM
    assert settings.approval_timeout_s == 30
    assert settings.policy_file is None  # the user's policy file is kept, not replaced
    assert folder / "rules" / "extra.toml" in settings.sandbox_protected_paths
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


SECRET = "OPENAI_API_KEY=sk-user-secret\n"


def path_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Ways a file could name something outside its folder: (what it writes, what is shown)."""
    write(tmp_path / "secret.env", SECRET)
    (tmp_path / "agents").mkdir(exist_ok=True)
    (tmp_path / "agents" / "link.md").symlink_to(tmp_path / "secret.env")
    return {
        "a parent folder": ("../secret.env", "../secret.env"),
        "an absolute path": (str(tmp_path / "secret.env"), str(tmp_path / "secret.env")),
        "the process's environment": ("/proc/self/environ", "/proc/self/environ"),
        "a link out of the folder": ("link.md", "link.md"),
        "the home folder": ("~/.bashrc", "~/.bashrc"),
    }


@pytest.mark.parametrize(
    ("key", "text", "column"),
    [
        ("system_prompt_file", "system_prompt_file: {}\n", 21),
        ("policy.file", "policy:\n  file: {}\n", 9),
        ("model.script", "model:\n  script: {}\n", 11),
    ],
)
def test_a_file_named_outside_the_agent_files_folder_is_not_read(
    tmp_path: Path, key: str, text: str, column: int
) -> None:
    for case, (named, shown) in path_cases(tmp_path).items():
        path = write(tmp_path / "agents" / "a.yaml", text.format(named))
        with pytest.raises(AgentFileError) as caught:
            load_agent_file(path)
        line = text.count("\n")
        assert str(caught.value) == (
            f"{path}:{line}:{column}: {key}: {shown} is outside the agent file's folder "
            f"({tmp_path / 'agents'}): an agent file may only name files in its own folder "
            "or below"
        ), case


def test_files_in_the_folder_and_below_are_read_through_links_that_stay_inside(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "agents"
    write(folder / "prompts" / "main.md", "You are careful.\n")
    (folder / "prompt.md").symlink_to(folder / "prompts" / "main.md")
    agent = load_agent_file(write(folder / "a.yaml", "system_prompt_file: prompt.md\n"))
    assert agent.system_prompt == "You are careful."
    # Tools may not rewrite the agent's prompt or the file itself for later tasks.
    protected = agent.apply(AgentSettings()).sandbox_protected_paths
    assert set(protected) == {folder / "a.yaml", folder / "prompts" / "main.md"}


def test_only_a_regular_utf8_file_within_the_byte_cap_is_read(tmp_path: Path) -> None:
    import os

    from core_agent.agent_files.agent_definition import MAX_PROMPT_BYTES

    os.mkfifo(tmp_path / "pipe.md")  # reading it would wait for a writer forever
    (tmp_path / "latin1.md").write_bytes(b"Be brief.\ncaf\xe9\n")
    write(tmp_path / "long.md", "x" * (MAX_PROMPT_BYTES + 1))
    expected = {
        "pipe.md": "pipe.md is not a regular file",
        "latin1.md": "latin1.md is not UTF-8 text (line 2)",
        "long.md": "long.md is larger than 1,000,000 bytes",
        "missing.md": "no such file: missing.md",
    }
    for name, message in expected.items():
        path = write(tmp_path / "a.yaml", f"system_prompt_file: {name}\n")
        with pytest.raises(AgentFileError) as caught:
            load_agent_file(path)
        assert str(caught.value) == f"{path}:1:21: system_prompt_file: {message}"


def test_a_long_chain_of_tool_sets_is_expanded_without_recursion(tmp_path: Path) -> None:
    sets = "".join(f"  s{i}: [s{i - 1}]\n" for i in range(1, 5000))
    path = write(tmp_path / "a.yaml", f"tool_sets:\n  s0: [calculator]\n{sets}tools: [s4999]\n")
    assert load_agent_file(path).apply(AgentSettings()).tools == ("calculator",)


SERVER = "model:\n  name: openai/gpt-4o-mini\n  api_base: http://127.0.0.1:9/v1\n"


def test_a_server_the_file_chose_does_not_get_the_users_key(tmp_path: Path) -> None:
    agent = load_agent_file(write(tmp_path / "a.yaml", SERVER))
    user = AgentSettings(model_api_key="sk-user-secret")  # as AGENT_MODEL_API_KEY gives it
    withheld = agent.apply(user).model_api_key
    assert withheld is not None and withheld.get_secret_value() == "no-key-required"
    # With no key at all, litellm would read OPENAI_API_KEY: the placeholder is sent instead.
    nothing = agent.apply(AgentSettings()).model_api_key
    assert nothing is not None and nothing.get_secret_value() == "no-key-required"
    assert agent.cautions(AgentSettings()) == [
        f"{tmp_path / 'a.yaml'}:3:13: model.api_base sends the model's requests to "
        "http://127.0.0.1:9/v1, which this agent file chose: your API keys are not sent there "
        "(a placeholder key is); trust the file to send them (--trust-agent-file, or "
        "AGENT_TRUST_AGENT_FILE=true)"
    ]

    # The user's own choices are kept: trust, a key given for this agent, the same server.
    trusted = agent.apply(user.model_copy(update={"trust_agent_file": True}))
    assert trusted.model_api_key == user.model_api_key
    explicit = agent.with_settings(model_api_key="sk-for-this-agent").apply(user)
    assert explicit.model_api_key is not None
    assert explicit.model_api_key.get_secret_value() == "sk-for-this-agent"
    same = user.model_copy(update={"model_api_base": "http://127.0.0.1:9/v1"})
    assert agent.apply(same).model_api_key == user.model_api_key
    assert agent.cautions(same) == []


THRESHOLD = "policy:\n  approval_required_risk: critical\n"
OPENING = """\
policy:
  rules:
    - name: anything-goes
      tools: [run_command]
      commands: ["*"]
      risk: low
      network: true
"""


def test_an_untrusted_file_may_not_let_more_calls_run_without_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "a.yaml", THRESHOLD)
    agent = load_agent_file(path)
    with pytest.raises(AgentFileError) as caught:
        agent.apply(AgentSettings())
    assert str(caught.value) == (
        f"{path}:2:27: policy.approval_required_risk: 'critical' would let calls your settings "
        "send to a human (from 'high') run without asking; an agent file may only lower the "
        "threshold unless you trust it (--trust-agent-file, or AGENT_TRUST_AGENT_FILE=true)"
    )
    with pytest.raises(AgentFileError, match="trust"):
        create_kernel(AgentSettings(data_dir=tmp_path / "data"), agent=path)
    assert not (tmp_path / "data").exists()  # refused before anything was opened

    # Trusted, or no higher than the settings' own threshold, it applies.
    monkeypatch.setenv("AGENT_TRUST_AGENT_FILE", "true")
    assert agent.apply(AgentSettings()).policy_approval_required_risk is RiskLevel.CRITICAL
    monkeypatch.delenv("AGENT_TRUST_AGENT_FILE")
    critical = AgentSettings(policy_approval_required_risk=RiskLevel.CRITICAL)
    assert agent.apply(critical).policy_approval_required_risk is RiskLevel.CRITICAL
    lower = load_agent_file(write(tmp_path / "b.yaml", "policy: {approval_required_risk: low}"))
    assert lower.apply(AgentSettings()).policy_approval_required_risk is RiskLevel.LOW


def test_an_untrusted_files_rules_may_not_open_the_network(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", OPENING)
    with pytest.raises(AgentFileError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path / "data"), agent=path)
    assert str(caught.value) == (
        f"{path}:7:16: policy.rules[0] sets network: true: an agent file's rules may not open "
        "the network to commands unless you trust the file (--trust-agent-file, or "
        "AGENT_TRUST_AGENT_FILE=true)"
    )
    write(
        tmp_path / "rules.toml", '[[rule]]\nname = "fetch"\ncommands = ["curl *"]\nnetwork = true\n'
    )
    path = write(tmp_path / "b.yaml", "policy:\n  file: rules.toml\n")
    with pytest.raises(AgentFileError, match=r"b\.yaml:2:9: policy\.file: rule 'fetch' sets net"):
        load_agent_file(path).apply(AgentSettings())
    trusted = AgentSettings(data_dir=tmp_path / "data", trust_agent_file=True)
    assert load_agent_file(path).apply(trusted).trust_agent_file


def grade(container: KernelContainer, tool: str, arguments: dict[str, str]) -> tuple[str, str]:
    spec = next(s for s in container.tool_registry().specs() if s.name == tool)
    decision = container.policy_engine().evaluate(spec, arguments)
    return decision.rule, decision.risk.value


RULES = """\
policy:
  rules:
    - {name: writes-are-fine, tools: [write_file], risk: low}
    - {name: review-arithmetic, tools: [calculator], risk: high}
"""


@pytest.mark.parametrize("trusted", [False, True])
def test_an_untrusted_files_rules_only_make_calls_safer(tmp_path: Path, trusted: bool) -> None:
    path = write(tmp_path / "a.yaml", RULES)
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data", trust_agent_file=trusted))
    use_agent_file(container, path)
    write_call = grade(container, "write_file", {"path": "notes.txt", "content": "x"})
    if trusted:  # read first, its grade rule lowers the call's risk
        assert write_call == ("writes-are-fine", "low")
    else:  # like a business capability's rule: it could only have raised it
        assert write_call[0] != "writes-are-fine" and write_call[1] != "low"
    assert grade(container, "calculator", {"expression": "1+1"}) == ("review-arithmetic", "high")


def test_the_users_policy_file_still_holds_beside_the_agents(tmp_path: Path) -> None:
    user = write(
        tmp_path / "mine.toml",
        '[[rule]]\nname = "no-notes"\neffect = "deny"\ntools = ["write_file"]\n',
    )
    write(tmp_path / "agents" / "rules.toml", '[[rule]]\nname = "x"\ntools = ["grep"]\n')
    path = write(tmp_path / "agents" / "a.yaml", "policy:\n  file: rules.toml\n")
    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=tmp_path / "data", policy_file=user))
    use_agent_file(container, path)
    spec = next(s for s in container.tool_registry().specs() if s.name == "write_file")
    decision = container.policy_engine().evaluate(spec, {"path": "a.txt", "content": "x"})
    assert (decision.denied, decision.rule) == (True, "no-notes")
