"""The workspace's AGENTS.md as the chat reads it into the system prompt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core_agent.chat.chat_kernel import chat_settings
from core_agent.chat.project_instructions import (
    MAX_BYTES,
    read_project_instructions,
    system_prompt_with,
)
from core_agent.contracts.settings import AgentSettings


def test_agents_md_follows_the_system_prompt_as_the_users_instructions(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Rules\nRun `make test` after a change.\n")
    instructions = read_project_instructions(tmp_path)
    assert instructions is not None and not instructions.cut
    prompt = system_prompt_with("You are helpful.", instructions)
    assert prompt.startswith("You are helpful.\n\n## Project instructions (AGENTS.md)")
    assert "come from the user" in prompt and prompt.endswith("Run `make test` after a change.")
    assert str(tmp_path / "AGENTS.md") in prompt


def test_no_file_a_blank_one_or_a_folder_adds_nothing(tmp_path: Path) -> None:
    assert read_project_instructions(tmp_path) is None
    (tmp_path / "AGENTS.md").write_text("  \n\n")
    assert read_project_instructions(tmp_path) is None
    assert system_prompt_with("base", None) == "base"
    (tmp_path / "AGENTS.md").unlink()
    (tmp_path / "AGENTS.md").mkdir()
    assert read_project_instructions(tmp_path) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_agents_md_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "AGENTS.md")  # reading it would block the start forever
    assert read_project_instructions(tmp_path) is None


def test_a_long_file_is_cut_and_the_prompt_says_so(tmp_path: Path) -> None:
    text = "a" + "é" * MAX_BYTES  # two bytes each: the limit falls inside a character
    (tmp_path / "AGENTS.md").write_text(text, encoding="utf-8")
    instructions = read_project_instructions(tmp_path)
    assert instructions is not None and instructions.cut
    assert instructions.text == "a" + "é" * (MAX_BYTES // 2 - 1)  # no half character
    size = 1 + 2 * MAX_BYTES
    assert instructions.size == size
    prompt = system_prompt_with("base", instructions)
    assert prompt.endswith(f"[Only the first {MAX_BYTES} bytes of {size} are included.]")


def test_bytes_that_are_not_utf8_are_replaced(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"use tabs \xff\xfe please")
    instructions = read_project_instructions(tmp_path)
    assert instructions is not None and instructions.text == "use tabs \ufffd\ufffd please"


def test_the_chat_adds_the_coding_pack_and_the_workspace_and_nothing_else(
    tmp_path: Path,
) -> None:
    settings = AgentSettings(
        data_dir=tmp_path, capabilities=("reader",), policy_approval_required_risk="medium"
    )
    chatting = chat_settings(settings, tmp_path / "project")
    assert chatting.capabilities == ("reader", "coding_assistant")
    assert chatting.workspace_roots == (tmp_path / "project",)
    assert chatting.recovery == "off"
    unchanged = {"capabilities", "workspace_roots", "recovery"}
    assert {
        name: value for name, value in chatting.model_dump().items() if name not in unchanged
    } == {name: value for name, value in settings.model_dump().items() if name not in unchanged}
    again = chat_settings(chatting, tmp_path / "project")
    assert again.capabilities == ("reader", "coding_assistant")
