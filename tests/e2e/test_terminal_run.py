"""``core-agent run`` at a real pseudo-terminal: the answer streams, a given-up try is replaced."""

import io
import os
import sys
from pathlib import Path

import pexpect

from support.openai_server import OpenAIServer

CLI = str(Path(sys.executable).with_name("core-agent"))


def test_a_cut_try_streamed_to_the_terminal_is_replaced_by_the_next(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.reply("Forty-one is what the first try says before it is cut.", fault="cut")
    openai_server.reply("The answer is 42.")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(
        AGENT_DATA_DIR=str(tmp_path),
        AGENT_LLM_GATEWAY="openai_http",
        AGENT_MODEL="openai/local-model",
        AGENT_MODEL_API_BASE=openai_server.base_url,
        AGENT_MODEL_API_KEY="sk-x",
        AGENT_MODEL_RETRY_BASE_S="0",
        AGENT_MEMORY_RECALL_K="0",
        COLUMNS="100",
    )
    child = pexpect.spawn(
        CLI,
        ["run", "what is the answer?", "--mode", "react"],
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 100),
    )
    child.logfile_read = seen = io.StringIO()
    child.expect("status: succeeded")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    # The answer's line is drawn over as it grows (erase the line, draw it again): the last
    # drawing is the second try's whole answer, and the cut try's words are gone from it.
    last_drawn = seen.getvalue().rsplit("\x1b[2K", 1)[-1]
    assert last_drawn.startswith("The answer is 42.\r\n"), seen.getvalue()
    assert "Forty-one" not in last_drawn
