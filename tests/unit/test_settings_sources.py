"""Settings come from the environment and an explicit file only; typos stop start-up."""

from pathlib import Path

import pytest

from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.settings import AgentSettings


def test_a_dot_env_in_the_current_directory_is_never_read(tmp_path: Path) -> None:
    # What a model that can write the workspace would try: widen its own limits.
    (tmp_path / ".env").write_text(
        "AGENT_WORKSPACE_ROOTS=/\nAGENT_POLICY_APPROVAL_REQUIRED_RISK=critical\n"
    )
    settings = AgentSettings()  # the test runs in tmp_path (see conftest)
    assert settings.workspace_roots == ()
    assert settings.policy_approval_required_risk.value == "high"


def test_an_explicit_env_file_is_read_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "agent.env"
    file.write_text("AGENT_MAX_TURNS=7\nAGENT_MEMORY_RECALL_K=9\n")
    monkeypatch.setenv("AGENT_ENV_FILE", str(file))
    monkeypatch.setenv("AGENT_MEMORY_RECALL_K", "1")
    settings = AgentSettings()
    assert (settings.max_turns, settings.memory_recall_k) == (7, 1)
    assert settings.env_file == file


def test_a_missing_env_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_ENV_FILE", str(tmp_path / "nope.env"))
    with pytest.raises(ConfigurationError, match=r"AGENT_ENV_FILE=.*nope.env is not a readable"):
        AgentSettings()


def test_an_env_file_that_is_not_utf8_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Saved in a legacy code page: every command stopped with "internal error:
    # UnicodeDecodeError" (exit 1) instead of saying which file and which byte.
    file = tmp_path / "agent.env"
    file.write_bytes(b"AGENT_MODEL=\xff\xfeopenai/x\n")
    monkeypatch.setenv("AGENT_ENV_FILE", str(file))
    with pytest.raises(ConfigurationError) as caught:
        AgentSettings()
    assert str(caught.value) == (
        f"AGENT_ENV_FILE={file} is not UTF-8 text (byte 0xff at offset 12): save it as UTF-8"
    )


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("AGENT_WORKSPACE_ROOT", "AGENT_WORKSPACE_ROOTS"),
        ("AGENT_POLICY_APPROVAL_RISK", "AGENT_POLICY_APPROVAL_REQUIRED_RISK"),
        ("AGENT_SANDBOX_MODES", "AGENT_SANDBOX_MODE"),
    ],
)
def test_an_unknown_name_stops_start_up_with_the_closest_known_one(
    monkeypatch: pytest.MonkeyPatch, name: str, suggestion: str
) -> None:
    monkeypatch.setenv(name, "x")
    with pytest.raises(ConfigurationError, match=f"{name} \\(did you mean {suggestion}\\?\\)"):
        AgentSettings()


def test_unknown_names_in_the_env_file_are_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "agent.env"
    file.write_text("AGENT_MAX_TURN=3\n")
    monkeypatch.setenv("AGENT_ENV_FILE", str(file))
    with pytest.raises(ConfigurationError, match="did you mean AGENT_MAX_TURNS"):
        AgentSettings()


def test_names_of_other_software_can_be_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_NAME", "azure-pipelines-agent")
    with pytest.raises(ConfigurationError, match="AGENT_NAME"):
        AgentSettings()
    monkeypatch.setenv("AGENT_IGNORED_VARIABLES", "AGENT_NAME")
    AgentSettings()


def test_the_data_directory_follows_the_platform_convention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert AgentSettings().data_dir == tmp_path / "xdg" / "core-agent"
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path / "mine"))
    assert AgentSettings().data_dir == tmp_path / "mine"
