"""The model's streamed text as a person should read it: a call's given-up tries left out.

A model call that is tried again (its stream was cut, the server failed halfway) streams its
text again from the start, with a higher ``LLMDelta.attempt``. Every host that shows the text
(the chat's turns, ``core-agent run``) keeps it with ``ModelText``, so they agree on what the
model said.
"""

from __future__ import annotations

from shared.agent_protocol import LLMDelta


class ModelText:
    """The text streamed since ``clear``, without the text of tries that were given up.

    A delta whose attempt is higher than the one before it in the same model call starts that
    call over: the call's text so far is taken back. ``call_ended`` (at ``llm.completed`` or
    ``llm.failed``) closes the call, so the next call's first text, whatever its attempt (its
    first try may have failed before saying anything), never takes back an earlier call's.
    """

    def __init__(self) -> None:
        self.text = ""
        """What was streamed since ``clear`` and still stands."""
        self._attempt = 0  # the open call's latest try; 0 between calls
        self._call_from = 0  # where the open call's text starts in ``text``

    def add(self, delta: LLMDelta) -> int:
        """Take ``delta``'s text; how many characters at the end of ``text`` it took back.

        Mostly 0; when ``delta`` begins a new try of the open call, the length of what the
        earlier tries had said, which a host showing the text removes before adding the new.
        """
        taken_back = 0
        if not self._attempt:
            self._call_from = len(self.text)
        elif delta.attempt > self._attempt:
            taken_back = len(self.text) - self._call_from
            self.text = self.text[: self._call_from]
        self._attempt = delta.attempt
        self.text += delta.text
        return taken_back

    def call_ended(self) -> None:
        """The model call finished (or failed for good): its text stands."""
        self._attempt = 0

    def clear(self) -> None:
        """Start again from no text (a tool call or a plan step began)."""
        self.text = ""
        self._call_from = 0

    def shows(self, output: str) -> bool:
        """Whether the text streamed is ``output``, so that it need not be shown again."""
        return not output.strip() or output.strip() == self.text.strip()
