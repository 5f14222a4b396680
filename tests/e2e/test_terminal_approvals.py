"""Approving at the terminal, in a real pseudo-terminal: answers, and Ctrl-C at the prompt."""

import io
import os
import sys
from pathlib import Path

import pexpect

CLI = str(Path(sys.executable).with_name("core-agent"))


def spawn(tmp_path: Path) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(
        AGENT_DATA_DIR=str(tmp_path),
        AGENT_POLICY_APPROVAL_REQUIRED_RISK="low",  # every call asks the human
        COLUMNS="200",
    )
    return pexpect.spawn(
        CLI, ["run", "What is 6 * 7?"], env=env, encoding="utf-8", timeout=120, dimensions=(40, 200)
    )


def test_an_approval_answered_at_the_prompt_runs_the_call(tmp_path) -> None:
    child = spawn(tmp_path)
    child.expect("approve\\? ")
    child.sendline("y")
    child.expect("6 \\* 7 = 42")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_at_the_prompt_denies_that_call_and_the_run_ends_cleanly(tmp_path) -> None:
    child = spawn(tmp_path)
    child.logfile_read = seen = io.StringIO()
    child.expect("approve\\? ")
    child.sendintr()
    child.expect("interrupted: denied")
    child.expect("status: ")
    child.expect(pexpect.EOF)
    child.close()
    assert "Traceback" not in seen.getvalue()
    assert child.exitstatus in (0, 1)  # the run ended (never killed by the signal)
    assert child.signalstatus is None
