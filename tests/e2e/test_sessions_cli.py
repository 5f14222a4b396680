"""``core-agent sessions`` and ``run --session``, run as a user runs them."""

import json

from e2e.test_cli import run
from support.stdio_host import stdio_host


def test_a_session_is_started_continued_shown_closed_and_deleted(tmp_path) -> None:
    started = run("sessions", "new", "--user", "ada", "--meta", "app=demo", data_dir=tmp_path)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip()

    for task in ("What is 2 + 3?", "What is 4 * 5?"):
        result = run("run", "--session", session, task, data_dir=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stderr.strip().splitlines()[-1].endswith(f"session: {session}")

    (listed,) = json.loads(run("sessions", "list", "--json", data_dir=tmp_path).stdout)
    assert (listed["session_id"], listed["user_id"], listed["metadata"], listed["task_count"]) == (
        session,
        "ada",
        {"app": "demo"},
        2,
    )
    shown = json.loads(run("sessions", "show", session, "--json", data_dir=tmp_path).stdout)
    messages = [(e["message"]["kind"], e["message"].get("content")) for e in shown["entries"]]
    assert messages[0] == ("user", "What is 2 + 3?") and messages[3] == ("assistant", "2 + 3 = 5")
    assert messages[4] == ("user", "What is 4 * 5?") and messages[-1] == ("assistant", "4 * 5 = 20")
    text = run("sessions", "show", session, data_dir=tmp_path).stdout
    assert "[1] user: What is 2 + 3?" in text and "calculator" in text

    assert run("sessions", "close", session, data_dir=tmp_path).returncode == 0
    refused = run("run", "--session", session, "What is 1 + 1?", data_dir=tmp_path)
    assert refused.returncode == 2 and "is closed" in refused.stderr

    deleted = run("sessions", "delete", session, data_dir=tmp_path)
    assert deleted.returncode == 0 and "2 tasks" in deleted.stdout
    assert json.loads(run("sessions", "list", "--json", data_dir=tmp_path).stdout) == []
    assert json.loads(run("tasks", "--json", data_dir=tmp_path).stdout) == []
    missing = run("sessions", "show", session, data_dir=tmp_path)
    assert missing.returncode == 2 and "no session" in missing.stderr


def test_a_session_is_forked_at_a_turn_and_retried_from_one(tmp_path) -> None:
    session = run("sessions", "new", data_dir=tmp_path).stdout.strip()
    for task in ("What is 2 + 3?", "What is 4 * 5?", "What is 9 - 1?"):
        assert run("run", "--session", session, task, data_dir=tmp_path).returncode == 0

    forked = run("sessions", "fork", session, "--at", "2", "--json", data_dir=tmp_path)
    assert forked.returncode == 0, forked.stderr
    fork = json.loads(forked.stdout)
    assert fork["forked_from"] == {"session_id": session, "turn": 2}
    shown = json.loads(
        run("sessions", "show", fork["session_id"], "--json", data_dir=tmp_path).stdout
    )
    assert {e["turn"] for e in shown["entries"]} == {1, 2}

    retried = run(
        "sessions", "retry", session, "--from", "2", "--task", "What is 6 * 7?", data_dir=tmp_path
    )
    assert retried.returncode == 0, retried.stderr
    assert "6 * 7 = 42" in retried.stdout and "status: succeeded" in retried.stderr
    text = run("sessions", "show", session, data_dir=tmp_path).stdout
    assert "── turn 2 · superseded by turn 4 (a retry)" in text
    assert "── turn 3 · superseded by turn 4 (a retry)" in text
    assert "── turn 4 · retry of turn 2" in text
    assert "(superseded) user: What is 4 * 5?" in text and "user: What is 6 * 7?" in text
    shown = json.loads(run("sessions", "show", session, "--json", data_dir=tmp_path).stdout)
    live = [e["message"].get("content") for e in shown["entries"] if not e["superseded_by"]]
    assert "What is 4 * 5?" not in live and live[-1] == "6 * 7 = 42"

    for args, said in (
        (("retry", session, "--from", "9"), "has turns 1 to 4, not 9"),
        (("retry", session, "--from", "3"), "was superseded"),
        (("fork", "no-such-session"), "no session"),
        (("retry", session, "--from", "0"), "--from"),
    ):
        refused = run("sessions", *args, data_dir=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and said in refused.stderr


def test_a_host_retries_and_forks_a_session_over_the_stdio_protocol(tmp_path) -> None:
    # The host's script answers by a conversation's first message: what the tasks answer
    # does not matter here, every ended task adds its turn.
    host = stdio_host(tmp_path)
    with host.serve() as client:
        session = "对话"
        for text in ("nap one", "nap two"):
            task = client.call("execute_task", {"task": text, "session_id": session})["task_id"]
            client.notification("task/result", task_id=task)
        accepted = client.call(
            "retry_from_turn", {"session_id": session, "turn": 2, "task": "nap again"}
        )
        assert accepted["kind"] == "task_accepted" and accepted["session_id"] == session
        result = client.notification("task/result", task_id=accepted["task_id"])["params"]
        assert result["session_id"] == session
        task = client.call("get_task", {"task_id": accepted["task_id"]})
        assert task["request"]["task"] == "nap again"
        assert task["request"]["metadata"] == {"retry_of_turn": 2}
        fork = client.call("fork_session", {"session_id": session, "new_session_id": "分支"})
        assert fork["session_id"] == "分支"
        assert fork["forked_from"] == {"session_id": session, "turn": 3}
        refused = client.request("retry_from_turn", {"session_id": session, "turn": 2})
        assert "was superseded" in refused["error"]["message"]
        bad = client.request("retry_from_turn", {"session_id": session, "turn": 0})
        assert "error" in bad
