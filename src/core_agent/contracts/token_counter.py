"""Port for counting tokens the way a model's tokenizer does."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from shared.agent_protocol import ChatMessage


class ITokenCounter(abc.ABC):
    """Counts tokens offline (no download at run time). Pure computation; never blocks on I/O."""

    @abc.abstractmethod
    def count_text(self, text: str) -> int:
        """Tokens in ``text``."""

    @abc.abstractmethod
    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens the messages take in a prompt, including per-message overhead."""
