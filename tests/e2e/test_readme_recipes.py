"""The README's local-server recipe, run as written against the tests' OpenAI server.

The README block that shows it needs a real model in general (it is skipped by the README
test); its local-server line is taken from the README here and run with only the address
swapped for the tests' server's, and no key in the environment: a local server just works.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from support.openai_server import OpenAIServer

README = Path(__file__).resolve().parents[2] / "README.md"
VENV_BIN = Path(sys.executable).parent


def local_server_recipe() -> str:
    text = README.read_text(encoding="utf-8")
    # The command starting with AGENT_MODEL=openai/... AGENT_MODEL_API_BASE=..., continued
    # over backslash-ended lines.
    match = re.search(
        r"^(AGENT_MODEL=openai/\S+ AGENT_MODEL_API_BASE=\S+.*?(?:\\\n.*?)*)$", text, re.M
    )
    assert match, "the README lost its local-server recipe"
    return match.group(1).split("#")[0].replace("\\\n", " ")


def test_the_local_server_recipe_runs_without_a_key(tmp_path, openai_server: OpenAIServer):
    recipe = local_server_recipe()
    address = re.search(r"AGENT_MODEL_API_BASE=(\S+)", recipe)
    assert address
    command = (
        recipe.replace(address.group(1), openai_server.base_url)
        .replace(".venv/bin/", f"{VENV_BIN}/")
        .replace('"..."', '"Say hello."')
    )
    openai_server.reply("Hello from the local server.")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "OPENAI_"))}
    done = subprocess.run(
        ["bash", "-c", command],
        env={**env, "AGENT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "Hello from the local server." in done.stdout
    assert openai_server.authorizations == ["Bearer no-key-required"]
