"""Texts cut or quoted before the stores redact them never keep part of a secret.

Found by a review of the secret-aware observation cut: the session history's own cut of a
tool result, a hook's error, the model classifier's note, pydantic's cut of a value in a
typed answer's error, and ``repr`` spelling a password again. Each test runs the real kernel
and SQLite stores and searches every file of the data directory for pieces of the secret.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr

from core_agent.container import KernelContainer
from core_agent.contracts.tool_hook import ToolHook
from providers.scripted_gateway import (
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import TaskRequest, TaskStatus, ToolCall, ToolResult

pytestmark = pytest.mark.anyio


def call(name: str, **arguments: object) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


def calls(*pairs: tuple[str, dict[str, object]]) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=[ScriptedToolCall(name=name, arguments=args) for name, args in pairs]
    )


def kernel_container(
    tmp_path: Path, turns: Sequence[ScriptedTurn], **settings: object
) -> tuple[KernelContainer, Path, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    data = tmp_path / "data"
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={"workspace_roots": (workspace,), "data_dir": data, **settings}
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(list(turns)))
    return container, workspace, data


def stored_bytes(data: Path) -> bytes:
    return b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())


def pieces(secret: str, size: int = 8) -> set[str]:
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


def kept_pieces(stored: bytes, secrets: Sequence[str], size: int = 8) -> list[str]:
    return sorted({p for s in secrets for p in pieces(s, size) if p.encode() in stored})


# --- A hook's error, cut to 500 characters before the store redacts it ----------------

HOST_KEY = "host-credential-3f9a8b7c6d5e"


class AuditHook(ToolHook):
    """A host's audit hook that refuses to pass a result and quotes it (an ``after_call``
    that raises is recorded; its reason goes to the tool span's ``hook_errors``)."""

    name = "audit"

    def after_call(self, call: ToolCall, result: ToolResult, context: object) -> None:
        raise ValueError(f"result not archived: {result.content}")


async def test_a_hooks_error_quoting_a_key_keeps_no_piece_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook's error is cut by the trace store after its redaction, never before it."""
    monkeypatch.setenv("OPENAI_API_KEY", HOST_KEY)
    container, workspace, data = kernel_container(
        tmp_path, [call("read_file", path="dump.log"), ScriptedTurn(content="Read.")]
    )
    (workspace / "dump.log").write_text(HOST_KEY * 40)
    kernel = container.kernel()
    kernel.add_tool_hook(AuditHook())
    async with kernel:
        result = await kernel.execute_task(TaskRequest(task="Read dump.log.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    stored = stored_bytes(data)
    assert b"result not archived" in stored
    assert kept_pieces(stored, [HOST_KEY]) == []


# --- Pydantic's own cut of an input value in a typed answer's validation error ----------

LONG_HOST_KEY = "host-credential-" + "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"


class Findings(BaseModel):
    findings: list[str]


async def test_a_typed_answers_error_keeps_no_piece_of_a_key_pydantic_would_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``final_answer`` whose arguments fail the requested model: the error the model reads
    (and the stores keep) names what failed, not the value (pydantic cuts each to its first
    and last 24 characters: a piece no literal search recognises)."""
    monkeypatch.setenv("OPENAI_API_KEY", LONG_HOST_KEY)
    container, _, data = kernel_container(
        tmp_path,
        [
            call("final_answer", findings=f"The .env file holds the key {LONG_HOST_KEY}"),
            call("final_answer", findings=["The .env file holds an OpenAI key."]),
        ],
    )
    async with container.kernel() as kernel:
        answer = await kernel.execute_task(
            TaskRequest(task="Audit the .env file."), response_model=Findings
        )
    assert answer == Findings(findings=["The .env file holds an OpenAI key."])
    stored = stored_bytes(data)
    assert b"valid list" in stored
    assert kept_pieces(stored, [LONG_HOST_KEY]) == []


# --- The session history's own cut of a tool result (``session_history.shorten``) -------


async def test_the_session_history_never_shortens_a_result_through_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn a task adds to its session cuts each tool result again (to
    ``session_result_chars``), outside of any secret, as the observation cut does. Keys back
    to back where the cuts fall, with the default ``max_observation_chars``."""
    monkeypatch.setenv("OPENAI_API_KEY", HOST_KEY)
    container, workspace, data = kernel_container(
        tmp_path, [call("read_file", path="dump.log"), ScriptedTurn(content="Read.")]
    )
    keys = HOST_KEY * 200
    (workspace / "dump.log").write_text(keys + "\n" + "log line\n" * 2000 + keys)
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read dump.log.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    stored = stored_bytes(data)
    assert b"left out of the session history" in stored
    assert kept_pieces(stored, [HOST_KEY]) == []


# --- The router's note of a failed model classification (``str(exc)[:300]``) ----------

GEMINI_KEY = "AIzaSyD3xQ7m2P9vL4kR8tN1bW6cY0eU5hJ2fGa"


async def test_a_failed_classifications_note_keeps_no_piece_of_the_model_key(
    tmp_path: Path,
) -> None:
    """With ``AGENT_ROUTER_CLASSIFIER=model``, a failed classification is noted in the route
    whole, redacted by the stores: a provider error quoting its request's URL holds the
    configured key (Google's API takes it as ``?key=``), which a cut could split."""

    def policy(messages: Sequence[object]) -> ScriptedTurn:
        first = getattr(messages[0], "content", "") or ""
        if "sub-goals" in first:
            url = (
                "https://generativelanguage.googleapis.com/v1beta/models/"
                + "gemini-2.0-flash-experimental-preview" * 4
                + f":generateContent?key={GEMINI_KEY}"
            )
            return ScriptedTurn(
                error=ScriptedError(
                    message=f"Client error '400 Bad Request' for url '{url}'", status_code=400
                )
            )
        return ScriptedTurn(content="Done.")

    container, _, data = kernel_container(
        tmp_path, [], router_classifier="model", model_api_key=SecretStr(GEMINI_KEY)
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=policy))
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Say done."))
    assert result.status is TaskStatus.SUCCEEDED
    stored = stored_bytes(data)
    assert b"model_error" in stored
    assert kept_pieces(stored, [GEMINI_KEY]) == []


# --- The head of broken raw arguments, shown with repr() after the cut ------------------


async def test_broken_raw_arguments_in_an_error_are_not_spelled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r"""Arguments that are not a JSON object are shown in the error as received: ``repr``
    doubled each backslash (``C:\\keys`` became ``C:\\\\keys``), a spelling of the host's
    password that the stores' redaction did not recognise."""
    password = r"C:\keys\Tr0ub4dor3"
    monkeypatch.setenv("DB_PASSWORD", password)
    raw = '{"path": ' + json.dumps(password) + ', "mode": '  # cut short by the model
    container, _, data = kernel_container(
        tmp_path,
        [
            ScriptedTurn(tool_calls=[ScriptedToolCall(name="read_file", raw_arguments=raw)]),
            ScriptedTurn(content="Could not read it."),
        ],
    )
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read it.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    stored = stored_bytes(data)
    assert b"must be a JSON object" in stored
    assert b"Tr0ub4dor3" not in stored


# --- A list under a secret-named member, in JSON a cut left undecodable ------------------

TOKENS = [f"tok9{i:02d}f8e7d6c5b4a3z" for i in range(5)]
"""Values that are secrets only by the name of the member holding them (a list of them)."""


async def read_tokens(tmp_path: Path, log_lines: int, lead: int = 0) -> bytes:
    """The data directory after a task read ``{"api_token": [...], "log": ...}``."""
    container, workspace, data = kernel_container(
        tmp_path, [call("read_file", path="tokens.json"), ScriptedTurn(content="Read.")]
    )
    text = json.dumps({"lead": "x" * lead, "api_token": TOKENS, "log": "log line " * log_lines})
    (workspace / "tokens.json").write_text(text)
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read it.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    return stored_bytes(data)


@pytest.mark.parametrize(
    ("log_lines", "lead", "cut"),
    [
        (0, 0, False),  # never cut: decoded whole
        (100, 0, False),  # remembered by its head (the checkpoint's fingerprints)
        (2000, 400, True),  # cut for the model, the list far from the cut
    ],
    ids=["whole", "remembered-head", "cut-for-the-model"],
)
async def test_a_list_under_a_secret_name_is_redacted_in_json_cut_short(
    tmp_path: Path, log_lines: int, lead: int, cut: bool
) -> None:
    """A cut leaves JSON that no longer decodes, however far it falls from the list: the
    list is still redacted by its member's name (to the end of the text if left open)."""
    stored = await read_tokens(tmp_path, log_lines=log_lines, lead=lead)
    assert (b"characters truncated" in stored) is cut
    assert b'"api_token' in stored
    assert kept_pieces(stored, TOKENS, size=12) == []
