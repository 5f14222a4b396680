"""An answer the model's output token limit cut off, gathered while the model goes on with it.

The reason-act loop asks the model to continue a cut answer and joins the pieces (see
``react_loop``). A piece with reasoning of its own is the answer's; a piece without is the
answer's unless a later piece closes a thought the model's chat template opened (the
template opens a block in every prompt, so such a piece was still thinking:
``inline_reasoning``). A fork rebuilding a run from its events keeps the same account.
"""

from __future__ import annotations

from dataclasses import dataclass

from core_agent.contracts.llm_gateway import TOKEN_LIMIT_FINISH_REASONS


def was_cut(finish_reason: str | None, has_tool_calls: bool) -> bool:
    """Whether an answer is a cut-off text the model is asked to go on with."""
    return not has_tool_calls and finish_reason in TOKEN_LIMIT_FINISH_REASONS


@dataclass(slots=True)
class CutAnswer:
    """The pieces of a cut answer so far."""

    answer: str = ""
    """Text known to be the answer's."""
    pending: str = ""
    """Text of pieces without reasoning of their own since ``answer``: not known yet."""
    continuations: int = 0
    """Times the model was asked to go on."""

    @property
    def length(self) -> int:
        """Characters gathered so far."""
        return len(self.answer) + len(self.pending)

    def settle(self, *, thought: bool, opened_in_prompt: bool) -> None:
        """What a new piece says of ``pending``: thinking, or the answer's (see the module).

        ``thought``: the piece had a thought of its own (reasoning, or a block it closed,
        even an empty one); ``opened_in_prompt``: it closed a block its template opened.
        """
        if opened_in_prompt:
            self.pending = ""
        elif thought:
            self.answer += self.pending
            self.pending = ""

    def keep(self, text: str, *, thought: bool) -> None:
        """Add a cut piece's text (the model is asked to go on with it)."""
        if thought:
            self.answer += text
        else:
            self.pending += text
        self.continuations += 1

    def joined(self, text: str) -> str:
        """The whole answer ending with ``text``; the account starts over."""
        whole = self.answer + self.pending + text
        self.clear()
        return whole

    def clear(self) -> None:
        """Forget the pieces (the model called tools instead of going on)."""
        self.answer, self.pending, self.continuations = "", "", 0
