"""``core-agent chat`` driven in a pseudo-terminal, as a person uses it.

Each test starts the real command in a pty (pexpect), types into it, and reads the screen.
The model is the scripted one (a script matched on each turn's message) or litellm against the
tests' local OpenAI-protocol server. No wall-clock limit is asserted: the timeouts are hang
guards. ``PROMPT_TOOLKIT_NO_CPR`` tells the line editor not to ask the terminal where its
cursor is (a terminal answers that; pexpect does not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from e2e.test_cli import run
from support.openai_server import OpenAIServer, Reply

CLI = Path(sys.executable).with_name("core-agent")
GUARD_S = 180  # a hang guard for one step, not a timing claim
PROMPT = "›"
TURN_END = "session:"  # the usage line after every turn
LONG = "sleep 600"


class Chat:
    """A running ``core-agent chat``."""

    def __init__(self, data: Path, workspace: Path, *args: str, **env: str) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
        self.child = pexpect.spawn(
            str(CLI),
            ["chat", "--workspace", str(workspace), *args],
            env={
                **base,
                "AGENT_DATA_DIR": str(data),
                "AGENT_STRATEGY_MODE": "react",
                # The long command must outlast the test's Ctrl-C, not time out by itself.
                "AGENT_SANDBOX_COMMAND_TIMEOUT_S": "900",
                "TERM": "xterm",
                "PROMPT_TOOLKIT_NO_CPR": "1",
                **env,
            },
            encoding="utf-8",
            dimensions=(40, 160),
            timeout=GUARD_S,
        )
        self.expect(PROMPT)

    def expect(self, text: str) -> str:
        """Wait for ``text`` on the screen; what came before it."""
        self.child.expect_exact(text)
        return str(self.child.before)

    def turn(self, message: str, *expected: str) -> str:
        """Send ``message``; wait for each of ``expected``, the usage line and the prompt."""
        self.child.send(message + "\r")
        seen = "".join(self.expect(text) for text in (*expected, TURN_END))
        self.expect(PROMPT)
        return seen

    def command(self, line: str, expected: str) -> None:
        self.child.send(line + "\r")
        self.expect(expected)
        self.expect(PROMPT)

    def approve(self, message: str, answer: str) -> None:
        """Send ``message`` and answer the approval question it leads to with ``answer``."""
        self.child.send(message + "\r")
        self.expect("approval needed")
        self.expect("approve?")
        self.child.send(answer)

    def interrupt_long_call(self, message: str) -> None:
        """A turn whose approved command runs until Ctrl-C cancels the turn."""
        self.approve(message, "y\r")
        self.expect("approved once")
        self.expect(f'"command": "{LONG}"')  # the call has started
        self.child.sendcontrol("c")
        self.expect("turn canceled")
        self.expect(TURN_END)
        self.expect(PROMPT)

    def quit(self) -> int:
        self.child.send("/exit\r")
        self.child.expect(pexpect.EOF)
        self.child.close()
        return int(self.child.exitstatus or 0)


def tasks(data: Path, **env: str) -> list[dict[str, Any]]:
    listed = run("tasks", "--json", data_dir=data, **env)
    assert listed.returncode == 0, listed.stderr
    return list(reversed(json.loads(listed.stdout)))  # oldest first


def transcript(data: Path, session: str) -> list[tuple[str, str | None]]:
    shown = run("sessions", "show", session, "--json", data_dir=data)
    assert shown.returncode == 0, shown.stderr
    entries = json.loads(shown.stdout)["entries"]
    return [(e["message"]["kind"], e["message"].get("content")) for e in entries]


def _turn(content: str | None = None, command: str | None = None) -> dict[str, Any]:
    if command is not None:
        return {"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}
    return {"content": content}


SCRIPT = {
    "conversations": [
        {"on": "last", "match": "^hello", "turns": [_turn("Hello! I am **scripted**.")]},
        {
            "on": "last",
            "match": "^make a note",
            "turns": [_turn(command="touch note.txt"), _turn("The note is made.")],
        },
        {
            "on": "last",
            "match": "^wait",
            "turns": [_turn(command=LONG), _turn("Waited.")],
        },
        {
            "on": "last",
            "match": "^refuse",
            "turns": [_turn(command="touch other.txt"), _turn("Understood, not done.")],
        },
        {"on": "last", "match": "^line one\nline two$", "turns": [_turn("Two lines received.")]},
        {"on": "last", "match": "^esc one\nesc two$", "turns": [_turn("Esc works too.")]},
        {"on": "last", "match": "^again", "turns": [_turn("Still here.")]},
    ]
}


@pytest.fixture
def scripted(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    return {"AGENT_SCRIPTED_MODEL_SCRIPT": str(script)}


def test_a_chat_with_the_scripted_model(tmp_path: Path, scripted: dict[str, str]) -> None:
    data, workspace = tmp_path / "data", tmp_path / "project"
    workspace.mkdir()
    secret = "tok-8f3a9c1d27e54b6f"
    chat = Chat(data, workspace, MY_SERVICE_TOKEN=secret, **scripted)

    # Two turns of one session; the second runs a command the person approves.
    first = chat.turn(f"hello there, my token is {secret}", "scripted", "in ·")
    assert "**" not in first  # Markdown is rendered, not shown as typed
    chat.approve("make a note", "y\r")
    chat.expect("approved once")
    chat.expect("→ [1] run_command")
    chat.expect("← [1]")
    chat.expect("The note is made.")
    chat.expect(TURN_END)
    chat.expect(PROMPT)
    assert (workspace / "note.txt").exists()
    chat.command("/show 1", '"command": "touch note.txt"')

    # Ctrl-C while the approved command runs: the turn ends canceled, the chat goes on.
    chat.interrupt_long_call("wait a minute")
    # Ctrl-C at the approval question denies that call; the model is told and answers.
    chat.approve("refuse it", "")
    chat.child.sendcontrol("c")
    chat.expect("denied")
    chat.expect("ApprovalDeniedError")
    chat.expect("Understood, not done.")
    chat.expect(TURN_END)
    chat.expect(PROMPT)
    assert not (workspace / "other.txt").exists()
    # A message of two lines: a line ending in a backslash goes on.
    chat.turn("line one\\\rline two", "Two lines received.")
    chat.turn("esc one\x1b\resc two", "Esc works too.")  # Esc then Enter: a new line
    chat.command("/hepl", "unknown command /hepl (did you mean /help?)")
    chat.command("/cost", "this session: 6 turns")
    assert chat.quit() == 0

    ran = tasks(data, **scripted)
    assert [t["request"]["task"] for t in ran] == [
        "hello there, my token is [REDACTED]",
        "make a note",
        "wait a minute",
        "refuse it",
        "line one\nline two",
        "esc one\nesc two",
    ]
    assert [t["status"] for t in ran] == [
        "succeeded",
        "succeeded",
        "canceled",
        "succeeded",
        "succeeded",
        "succeeded",
    ]
    session = ran[0]["session_id"]
    assert {t["session_id"] for t in ran} == {session}
    # What was typed is kept for ↑ in the data directory, for the user only, and redacted.
    history = data / "chat_history"
    assert "+hello there, my token is" in history.read_text() and "+line two" in history.read_text()
    assert secret not in history.read_text() and history.stat().st_mode & 0o077 == 0

    # A new chat resumes the earlier session by a prefix of its id, and goes on in it.
    again = Chat(data, workspace, **scripted)
    again.command("/sessions", session[:12])
    again.command(f"/resume {session[:8]}", f"resumed session {session[:12]}")
    again.turn("again", "Still here.")
    assert again.quit() == 0
    assert transcript(data, session)[-2:] == [("user", "again"), ("assistant", "Still here.")]


def answer_from_the_server(body: dict[str, Any]) -> Reply:
    """The local server's model: it answers by the newest user message and the turn it is in."""
    messages = body["messages"]
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    last = messages[users[-1]]["content"]
    step = sum(m["role"] == "assistant" for m in messages[users[-1] :])
    if last.startswith("Previous summary"):
        return Reply("The person said hello and asked for a note.")
    if last.startswith("hello"):
        return Reply("Hello from the **local server**.")
    if last.startswith("make a note"):
        if step == 0:
            return Reply(tool_calls=[{"name": "run_command", "arguments": {"command": "touch n"}}])
        return Reply("Noted.")
    if last.startswith("wait"):
        if step == 0:
            return Reply(tool_calls=[{"name": "run_command", "arguments": {"command": LONG}}])
        return Reply("Waited.")
    if last.startswith("what did I say first"):
        earlier = messages[users[0]]["content"] if len(users) > 1 else "nothing"
        if any("The person said hello" in (m["content"] or "") for m in messages):
            earlier = "hello (the summary says so)"  # after /compact
        return Reply(f"You first said: {earlier}")
    return Reply("I do not know that one.")


def test_a_chat_through_litellm_with_the_local_server(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    data, workspace = tmp_path / "data", tmp_path / "project"
    workspace.mkdir()
    (workspace / "AGENTS.md").write_text("Answer like a pirate.\n", encoding="utf-8")
    openai_server.responder = answer_from_the_server
    env = {
        "AGENT_MODEL": "openai/local-model",
        "AGENT_MODEL_API_BASE": openai_server.base_url,  # no key: a placeholder is sent
        "AGENT_MODEL_MAX_RETRIES": "0",
    }
    chat = Chat(data, workspace, **env)
    chat.turn("hello", "local server", "cost unknown")
    system = openai_server.requests[0]["messages"][0]["content"]
    assert "Project instructions (AGENTS.md)" in system and "Answer like a pirate." in system
    chat.approve("make a note", "y\r")
    chat.expect("Noted.")
    chat.expect(TURN_END)
    chat.expect(PROMPT)
    assert (workspace / "n").exists()
    chat.interrupt_long_call("wait for it")
    chat.command("/compact", "compacted")
    chat.command("/model openai/other-model", "model: openai/other-model from the next turn on")
    chat.turn("what did I say first?", "You first said: hello")
    assert openai_server.requests[-1]["model"] == "other-model"
    chat.command("/new", "new session")
    chat.turn("what did I say first?", "You first said: nothing")
    assert chat.quit() == 0

    ran = tasks(data, **env)
    assert [t["status"] for t in ran] == [
        "succeeded",
        "succeeded",
        "canceled",
        "succeeded",
        "succeeded",
    ]
    first_session = ran[0]["session_id"]

    # Another chat, as the agent an agent file describes: its model and prompt, the
    # workspace's instructions still added; /model still switches.
    agent = tmp_path / "agents" / "pirate.yaml"
    agent.parent.mkdir()
    agent.write_text(
        "name: pirate\nmodel:\n  name: openai/file-model\n"
        "system_prompt: You are the file's agent.\n"
    )
    again = Chat(data, workspace, "--agent", str(agent), **env)
    again.command(f"/resume {first_session[:10]}", "resumed session")
    again.turn("what did I say first?", "You first said: hello")
    sent = openai_server.requests[-1]
    assert sent["model"] == "file-model"
    assert sent["messages"][0]["content"].startswith("You are the file's agent.")
    assert "Answer like a pirate." in sent["messages"][0]["content"]
    again.command("/model openai/third-model", "model: openai/third-model from the next turn on")
    again.turn("what did I say first?", "You first said: hello")
    assert openai_server.requests[-1]["model"] == "third-model"
    assert openai_server.requests[-1]["messages"][0]["content"].startswith("You are the file's")
    assert again.quit() == 0
    assert len({t["session_id"] for t in tasks(data, **env)}) == 2


def test_chat_needs_a_terminal(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    piped = subprocess.run(
        [str(CLI), "chat"],
        env={**base, "AGENT_DATA_DIR": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    assert piped.returncode == 2
    assert "needs a terminal" in piped.stderr and "Traceback" not in piped.stderr


def test_a_bad_setting_ends_the_chat_in_one_line(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    child = pexpect.spawn(
        str(CLI),
        ["chat", "--workspace", str(tmp_path)],
        env={**base, "AGENT_DATA_DIR": str(tmp_path), "AGENT_MAX_TURNS": "abc", "TERM": "xterm"},
        encoding="utf-8",
        timeout=GUARD_S,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
    assert "AGENT_MAX_TURNS" in str(child.before) and "Traceback" not in str(child.before)


def test_a_bad_agent_file_is_refused_before_the_chat_starts(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text("name: x\nstratgy: {}\n")
    result = run("chat", "--agent", str(tmp_path / "agent.yaml"), data_dir=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "unknown key 'stratgy'" in result.stderr and "Traceback" not in result.stderr


def test_a_workspace_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = run("chat", "--workspace", str(missing), data_dir=tmp_path)  # checked first
    assert result.returncode == 2 and "not a directory" in result.stderr
