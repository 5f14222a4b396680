"""``ITokenCounter`` on tiktoken, with its encodings read from files shipped offline.

tiktoken downloads an encoding the first time it is used. litellm (a dependency) ships
``cl100k_base``, ``o200k_base`` and ``p50k_base`` in the layout of tiktoken's cache, so we
point ``TIKTOKEN_CACHE_DIR`` there unless the host chose its own; no network is needed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.token_counter import ITokenCounter
from shared.agent_protocol import AssistantMessage, ChatMessage, ToolMessage

_lock = threading.Lock()
# OpenAI's accounting for chat prompts: each message costs a few tokens of framing and the
# reply is primed with three more.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_REPLY = 3


def bundled_encodings_dir() -> Path | None:
    """The folder of tiktoken files litellm ships, found without importing litellm (slow)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / ("litellm_core_utils/tokenizers")
    return folder if folder.is_dir() else None


def _encoding(name: str) -> Any:
    with _lock:
        if "TIKTOKEN_CACHE_DIR" not in os.environ:
            bundled = bundled_encodings_dir()
            if bundled is not None:
                os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
        import tiktoken

        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # unknown name, or a download attempted with no network
            raise ConfigurationError(
                f"tiktoken encoding {name!r} is not available offline ({exc}); shipped: "
                "cl100k_base, o200k_base, p50k_base"
            ) from exc


class TiktokenTokenCounter(ITokenCounter):
    """Counts with one tiktoken encoding (``cl100k_base`` by default)."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self._encoding = _encoding(encoding)
        self.encoding_name = encoding

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> TiktokenTokenCounter:
        """The encoding ``AGENT_TOKENIZER_ENCODING`` names."""
        return cls(settings.tokenizer_encoding)

    def count_text(self, text: str) -> int:
        """Tokens in ``text``; special-token markers count as ordinary text."""
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        """Prompt tokens, including per-message framing and tool-call arguments."""
        total = TOKENS_PER_REPLY
        for message in messages:
            total += TOKENS_PER_MESSAGE + 1  # the role is one token
            if message.content:
                total += self.count_text(message.content)
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    arguments = (
                        json.dumps(call.arguments)
                        if call.arguments is not None
                        else call.raw_arguments or ""
                    )
                    total += self.count_text(call.name) + self.count_text(arguments)
            if isinstance(message, ToolMessage):
                total += self.count_text(message.name)
        return total
