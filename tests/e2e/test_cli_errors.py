"""Bad input to every command: one line saying what is wrong, exit 2 (or 1), no traceback."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

CLI = Path(sys.executable).with_name("core-agent")

# (arguments, extra environment, exit status, what the line must say)
CASES = [
    (["run", ""], {}, 2, "the task: string should have at least 1 character"),
    (["run", "x", "--max-turns", "0"], {}, 2, "--max-turns: must be at least 1"),
    (["run", "x", "--mode", "reactt"], {}, 2, "invalid choice: 'reactt'"),
    (["run", "x"], {"AGENT_STRATEGY_MODE": "reactt"}, 2, "did you mean 'react'?"),
    (["run", "x"], {"AGENT_MAX_TURNS": "abc"}, 2, "AGENT_MAX_TURNS: input should be a valid"),
    (["run", "x"], {"AGENT_DATA_DIR": "/proc/no/such"}, 2, "data directory /proc/no/such"),
    (["run", "x"], {"AGENT_MODLE": "openai/x"}, 2, "AGENT_MODLE"),
    (["frobnicate"], {}, 2, "invalid choice: 'frobnicate'"),
    (["tasks", "--limit", "-3"], {}, 2, "--limit: must be at least 1"),
    (["tasks", "--status", "done"], {}, 2, "invalid choice: 'done'"),
    (["trace", "nope"], {}, 2, "no task with id 'nope'"),
    (["audit", "nope"], {}, 2, "nope"),
    (["resume", "nope"], {}, 2, "nope"),
    (["cancel", "nope"], {}, 2, "nope"),
    (["resolve", "nope", "--approve"], {}, 2, "nope"),
    (["resolve", "nope"], {}, 2, "one of the arguments --approve --deny is required"),
    (["policy", "check", "--tool", "nope"], {}, 2, "unknown tool 'nope'"),
    (["policy", "check", "--tool", "read_file", "--args", "[1]"], {}, 2, "JSON object"),
    (["route", ""], {}, 2, "the task: string should have at least 1 character"),
    (["sessions", "show", "nope"], {}, 2, "nope"),
    (["search", "x", "-k", "0"], {}, 2, "-k: must be at least 1"),
    (["vectors", "migrate", "--to", "lancedb"], {}, 2, "arguments are required: --from"),
    (["vectors", "migrate", "--from", "sqlite_vec", "--to", "nope"], {}, 2, "nope"),
]


@pytest.mark.parametrize(("args", "env", "status", "says"), CASES, ids=lambda c: repr(c)[:40])
def test_bad_input_is_one_clear_line(tmp_path, args, env, status, says) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    done = subprocess.run(
        [str(CLI), *args],
        env={**base, "AGENT_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]


def test_debug_adds_the_traceback(tmp_path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    done = subprocess.run(
        [str(CLI), "--debug", "run", "x"],
        env={**base, "AGENT_DATA_DIR": str(tmp_path), "AGENT_MAX_TURNS": "abc"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "AGENT_MAX_TURNS" in done.stderr.splitlines()[-1]


def test_a_reader_that_goes_away_is_not_an_error(tmp_path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    # `core-agent schema | head -1`: the pipe closes long before the schema is written.
    done = subprocess.run(
        f"'{CLI}' schema | head -1",
        shell=True,
        env={**base, "AGENT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip() == "{"
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("args", [["run", "2 + 2"], ["tasks"], ["stats"]])
def test_a_database_from_a_newer_core_agent_is_refused_in_one_line(tmp_path, args) -> None:
    from providers.sqlite.migrations import MIGRATIONS

    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env = {**base, "AGENT_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    subprocess.run([str(CLI), "-q", "run", "1 + 1"], env=env, check=True, capture_output=True)
    newer = len(MIGRATIONS) + 1
    with sqlite3.connect(tmp_path / "core_agent.db") as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
        before = conn.execute("SELECT COUNT(*) FROM agent_tasks").fetchone()[0]
    conn.close()
    done = subprocess.run(
        [str(CLI), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert str(tmp_path / "core_agent.db") in line
    assert f"schema version {newer}" in line and f"up to {len(MIGRATIONS)}" in line
    assert "Upgrade core-agent" in line and "AGENT_DATA_DIR" in line
    with sqlite3.connect(tmp_path / "core_agent.db") as conn:
        after = conn.execute("SELECT COUNT(*) FROM agent_tasks").fetchone()[0]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == newer
    conn.close()
    assert after == before
