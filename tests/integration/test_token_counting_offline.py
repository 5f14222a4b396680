"""Token counts come from encodings on disk, and Chinese is counted as a model counts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.cjk_text import count_cjk

CHINESE = (
    "习惯的养成依赖于重复。每天在同一时间阅读二十分钟，比周末一次读三个小时更容易坚持。"
    "把新习惯和已有的习惯绑在一起，例如喝完早茶就打开书，会让开始变得毫不费力。"
)
SCRIPT = """
import json, sys
from providers.tiktoken_token_counter import TiktokenTokenCounter
text = sys.argv[1]
print(json.dumps({name: TiktokenTokenCounter(name).count_text(text)
                  for name in ("cl100k_base", "o200k_base")}))
"""


@pytest.fixture
def offline_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in {"TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"}
    }
    # Any download would go through a closed port and fail; tiktoken's own cache in the
    # temporary folder is empty.
    env.update(
        HTTPS_PROXY="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        NO_PROXY="",
        TMPDIR=str(tmp_path),
    )
    return env


def test_chinese_is_about_one_token_per_character_with_no_network(
    offline_env: dict[str, str],
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, CHINESE],
        env=offline_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    han = count_cjk(CHINESE)
    for name, tokens in counts.items():
        # cl100k_base spends about 1.3 tokens on a Han character, o200k_base about 0.8;
        # counting bytes (3 a character) or characters as English words would be far off.
        assert 0.6 * han <= tokens <= 1.6 * han, (name, tokens, han)
    assert list(Path(offline_env["TMPDIR"]).iterdir()) == []  # nothing cached or fetched
