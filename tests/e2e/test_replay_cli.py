"""``core-agent replay``, ``fork``, ``diff``, ``export`` and ``import``, run as a user runs them.

One task is recorded for the module the way a user makes one: ``run`` (the scripted model
reads a file, then writes one, which waits for a human), then ``resolve --approve``.
"""

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.openai_server import OpenAIServer

CLI = Path(sys.executable).with_name("core-agent")
SCRIPT = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "copy.txt", "content": "hi"}}]},
    {"content": "Copied the note."},
]


@dataclass
class Recorded:
    env: dict[str, str]
    workspace: Path
    task_id: str
    root: Path


def run(*args: str, env: dict[str, str], **more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args],
        env={**env, **more},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,  # no terminal, as in a script or CI
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("replay-cli")
    workspace = root / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    script = root / "script.json"
    script.write_text(json.dumps(SCRIPT))
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env = {
        **base,
        "AGENT_DATA_DIR": str(root / "data"),
        "AGENT_WORKSPACE_ROOTS": str(workspace),
        "AGENT_SCRIPTED_MODEL_SCRIPT": str(script),
        "AGENT_POLICY_APPROVAL_REQUIRED_RISK": "medium",
        "COLUMNS": "120",
    }
    waiting = run("run", "Copy notes.txt to copy.txt", "--json", env=env)
    assert waiting.returncode == 3, waiting.stderr
    pending = json.loads(run("approvals", "--json", env=env).stdout)
    resolved = run("resolve", pending[0]["request_id"], "--approve", env=env)
    assert resolved.returncode == 0, resolved.stderr
    return Recorded(env, workspace, pending[0]["task_id"], root)


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def test_replay_prints_every_step_numbered_in_order(recorded: Recorded) -> None:
    shown = run("replay", recorded.task_id[:12], env=recorded.env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    expected = [
        ("1", "route", "react"),
        ("3", "model", "read_file"),
        ("4", "tool call", 'read_file({"path": "notes.txt"})'),
        ("5", "policy", "read_file allowed (risk low"),
        ("7", "tool result", "read_file (untrusted)"),
        ("9", "tool call", "write_file("),
        ("10", "policy", "write_file needs approval"),
        ("11", "asked human", "write_file (risk high)"),
        ("13", "human", "approved (once) by cli"),
        ("16", "tool result", "write_file"),
        ("18", "answer", "Copied the note."),
    ]
    # Each step: its numbered line and the lines under it, up to the next step.
    blocks: dict[str, str] = {}
    current = None
    for line in lines[2:]:
        first = line.split()[:1]
        if first and first[0].isdigit():
            current = first[0]
        if current is not None:
            blocks[current] = blocks.get(current, "") + line + "\n"
    for number, label, text in expected:
        block = blocks.get(number, "")
        assert f"{number} {label}" in " ".join(block.split()), shown.stdout
        assert text in block, f"step {number} {label}: {text!r} not in:\n{shown.stdout}"
    as_json = json.loads(run("replay", "last", "--json", env=recorded.env).stdout)
    assert as_json["task"]["task_id"] == recorded.task_id
    assert [s["number"] for s in as_json["steps"]] == list(range(1, 19))


def test_rerun_reproduces_the_answer_and_calls_no_model(
    recorded: Recorded, server: OpenAIServer
) -> None:
    (recorded.workspace / "copy.txt").unlink(missing_ok=True)
    # The configured model is a server with nothing to say: any call to it would fail.
    rerun = run(
        "replay",
        recorded.task_id,
        "--rerun",
        env=recorded.env,
        AGENT_MODEL="openai/never-called",
        AGENT_MODEL_API_BASE=server.base_url,
        AGENT_MODEL_API_KEY="sk-x",
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "reproduced" in rerun.stdout
    assert "Copied the note." in rerun.stdout
    assert server.requests == []
    assert not (recorded.workspace / "copy.txt").exists()  # recorded tools act on nothing


def test_rerun_with_live_tools_reports_where_a_changed_file_shows(recorded: Recorded) -> None:
    elsewhere = recorded.root / "changed"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("goodbye\n")
    rerun = run(
        "replay",
        recorded.task_id,
        "--rerun",
        "--tools",
        "live",
        env=recorded.env,
        AGENT_WORKSPACE_ROOTS=str(elsewhere),
    )
    assert rerun.returncode == 1, rerun.stderr
    out = rerun.stdout
    assert "diverged at the recording's step 7" in out
    assert '-  "content": "hello\\n",' in out
    assert '+  "content": "goodbye\\n",' in out
    assert not (elsewhere / "copy.txt").exists()  # it stopped before the write
    misuse = run("replay", recorded.task_id, "--tools", "live", env=recorded.env)
    assert misuse.returncode == 2
    assert "--tools goes with --rerun" in misuse.stderr


def test_fork_with_another_model_then_diff(recorded: Recorded, server: OpenAIServer) -> None:
    server.reply("I read it and stop here.")
    prompt = recorded.root / "prompt.md"
    prompt.write_text("Do not write files.")
    fork = run(
        "fork",
        recorded.task_id,
        "--at",
        "7",
        "--model",
        "openai/other-model",
        "--prompt",
        str(prompt),
        env=recorded.env,
        AGENT_MODEL_API_BASE=server.base_url,
        AGENT_MODEL_API_KEY="sk-x",
    )
    assert fork.returncode == 0, fork.stderr
    assert fork.stdout.strip() == "I read it and stop here."
    assert f"of {recorded.task_id} at step 7" in fork.stderr
    assert server.requests[-1]["model"] == "other-model"
    assert server.requests[-1]["messages"][0]["content"].startswith("Do not write files.")
    fork_id = fork.stderr.split("task: ")[-1].split()[0]

    shown = run("replay", fork_id, env=recorded.env).stdout
    assert f"forked from {recorded.task_id} at step 7" in shown
    diff = run("diff", recorded.task_id, fork_id, env=recorded.env)
    assert diff.returncode == 1
    assert "they part at A's step 8 / B's step" in diff.stdout
    assert "I read it and stop here." in diff.stdout
    same = run("diff", recorded.task_id, recorded.task_id, "--json", env=recorded.env)
    assert same.returncode == 0
    assert json.loads(same.stdout)["same"] is True


@pytest.fixture(scope="module")
def exported(recorded: Recorded) -> Path:
    path = recorded.root / "task.jsonl"
    done = run("export", recorded.task_id, "-o", str(path), env=recorded.env)
    assert done.returncode == 0, done.stderr
    assert f"exported task {recorded.task_id}" in done.stderr
    return path


def test_export_then_import_elsewhere_replays_and_reruns(
    recorded: Recorded, exported: Path
) -> None:
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {r["type"] for r in records} == {"export", "task", "event", "span"}
    assert all(r["version"] == 1 for r in records)

    elsewhere = {**recorded.env, "AGENT_DATA_DIR": str(recorded.root / "other-machine")}
    imported = run("import", str(exported), env=elsewhere)
    assert imported.returncode == 0, imported.stderr
    assert recorded.task_id in imported.stdout
    here = run("replay", recorded.task_id, env=recorded.env).stdout
    there = run("replay", recorded.task_id, env=elsewhere).stdout
    assert there == here
    rerun = run("replay", recorded.task_id, "--rerun", env=elsewhere)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    again = run("import", str(exported), env=elsewhere)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"core-agent: task {recorded.task_id} is already in this data directory (imported before?)"
    ]


def test_bad_import_files_are_refused_in_one_line_and_store_nothing(
    recorded: Recorded, exported: Path
) -> None:
    lines = exported.read_text().splitlines()
    cut = recorded.root / "cut.jsonl"
    cut.write_text("\n".join(lines[:-2]) + "\n")  # the last spans are missing
    garbage = recorded.root / "garbage.jsonl"
    garbage.write_text("\n".join([*lines[:-1], "{not json"]) + "\n")
    # A span edited (reviewer's files): they failed with "internal error" (exit 1), and the
    # task and its events were stored all the same, or they were taken, and stats then said
    # cost $-inf.
    last = json.loads(lines[-1])
    deep = recorded.root / "deep.jsonl"
    nested = '{"a":' * 900 + "1" + "}" * 900
    text = json.dumps(last).replace('"attributes": {', f'"attributes": {{"deep": {nested}, ', 1)
    deep.write_text("\n".join([*lines[:-1], text]) + "\n")
    edited: dict[str, Path] = {}
    for name, change in (
        ("huge", {"tokens_in": 2**70}),
        ("negative", {"cost_usd": -1e308}),
        ("infinite", {"cost_usd": float("inf")}),
        ("foreign", {"trace_id": "f" * 32}),
    ):
        span = json.loads(lines[-1])
        span["span"].update(change)
        edited[name] = recorded.root / f"{name}.jsonl"
        edited[name].write_text("\n".join([*lines[:-1], json.dumps(span)]) + "\n")
    empty_dir = {**recorded.env, "AGENT_DATA_DIR": str(recorded.root / "untouched")}
    for path, message in (
        (cut, "the file is cut short or was edited"),
        (garbage, f"{garbage} line {len(lines)}: not JSON"),
        (deep, f"{deep} line {len(lines)}: nested more than"),
        (edited["huge"], f"line {len(lines)}: a number too large"),
        (edited["negative"], "a span with negative cost or tokens"),
        (edited["infinite"], f"line {len(lines)}: a number that is not finite"),
        (edited["foreign"], "a span of another trace"),
    ):
        refused = run("import", str(path), env=empty_dir)
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("core-agent: "), refused.stderr
        assert message in lines[0]
    assert json.loads(run("tasks", "--json", env=empty_dir).stdout) == []


def test_an_export_is_its_users_alone_and_never_written_through_a_planted_link(
    recorded: Recorded,
) -> None:
    # Reviewer's p1: the export (the task's prompts and results) came out 0644, written
    # through whatever was at the predictable .task.jsonl.partial: a link another user
    # planted there sent the task to their file, and the link itself became the export.
    folder = recorded.root / "exports"
    folder.mkdir()
    theirs = recorded.root / "theirs.txt"
    theirs.write_text("")
    (folder / ".task.jsonl.partial").symlink_to(theirs)
    old = os.umask(0o022)
    try:
        done = run("export", recorded.task_id, "-o", str(folder / "task.jsonl"), env=recorded.env)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    target = folder / "task.jsonl"
    assert not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text().splitlines()[0])["type"] == "export"
    assert theirs.read_text() == ""
    # Nothing of the export's own is left beside it.
    assert sorted(p.name for p in folder.iterdir()) == [".task.jsonl.partial", "task.jsonl"]
