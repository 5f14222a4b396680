"""A model that answers from a recording: call *n* gets the answer the model gave to call *n*.

A rerun puts it in place of the model gateway (through the container), so the current
kernel runs again on what the model said then, and no model is called. It lives in the
kernel's own package, not in providers, because the kernel builds it from its own records.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from functools import cache

from core_agent.contracts import errors
from core_agent.contracts.errors import ModelError, RunStoppedError
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
)
from core_agent.replay.recording import RecordedModelFailure, RecordedModelTurn
from shared.agent_protocol import TokenUsage


class ReplayDivergedError(ModelError, RunStoppedError):
    """The rerun asked for a model answer the recording cannot give.

    A ``RunStoppedError``: never retried, and no strategy recovers from it (a replan, a
    fallback or a question for a human would carry the rerun on with answers written for
    another run, or live), so the rerun ends ``failed`` with it.
    """


class RecordedLLMGateway(ILLMGateway):
    """Answers each call with the next recorded answer, in order, without calling a model.

    ``stop`` is asked before every answer: when it returns a reason (the run has already
    diverged from the recording), the call fails with ``ReplayDivergedError`` instead of
    handing the model's old answer to a run it no longer fits. A call beyond the recording
    fails the same way, and is remembered in ``extra_call``. Once one call failed so, every
    later one fails with the same reason: the rerun has parted from the recording for good.

    The answers keep their recorded tokens, at no cost: nothing was paid for them again. A
    call that failed then fails again, with the same error (``model_failure``), once: it is
    not retried, the recording holds what came after.
    """

    def __init__(
        self,
        turns: Sequence[RecordedModelTurn | RecordedModelFailure],
        *,
        stop: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._turns = list(turns)
        self._stop = stop
        self.calls = 0
        """Answers handed out so far."""
        self.extra_call: str | None = None
        """Set when the run asked for more answers than the recording holds."""
        self.diverged: str | None = None
        """Why the answers stopped, once they did."""
        first = self._turns[0].model if self._turns else "none"
        self._name = f"recorded/{first}"

    @property
    def model_name(self) -> str:
        """``recorded/<the recorded model>``."""
        return self._name

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The next recorded answer.

        Raises:
            ReplayDivergedError: The run already diverged, or the recording has no more
                answers.
            ModelError: The recorded call failed (``model_failure``).
        """
        if self.diverged is None:
            reason = self._stop()
            if reason is not None:
                self.diverged = (
                    f"replay stopped: the run diverged from the recording ({reason}); "
                    "its recorded model answers no longer apply"
                )
            elif self.calls >= len(self._turns):
                self.extra_call = (
                    f"the run asked for model answer {self.calls + 1}; the recording has "
                    f"{len(self._turns)}"
                )
                self.diverged = (
                    f"replay stopped: the run diverged from the recording ({self.extra_call})"
                )
        if self.diverged is not None:
            raise ReplayDivergedError(self.diverged)
        turn = self._turns[self.calls]
        self.calls += 1
        if isinstance(turn, RecordedModelFailure):
            raise model_failure(turn)
        usage = TokenUsage(
            input_tokens=turn.usage.input_tokens, output_tokens=turn.usage.output_tokens, cost_usd=0
        )
        finish = turn.finish_reason or ("tool_calls" if turn.message.tool_calls else "stop")
        return LLMResponse(
            message=turn.message,
            usage=usage,
            model=turn.model,
            finish_reason=finish,
            reasoning_opened_in_prompt=turn.reasoning_opened_in_prompt,
        )

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """The same answer, its text in one piece first."""
        response = await self.complete(request)
        if response.message.content:
            yield LLMTextDelta(response.message.content)
        yield response


def model_failure(failure: RecordedModelFailure) -> ModelError:
    """The error a recorded failed call raised, again.

    Of its class where the kernel has one that is built from a message (so a run handles it
    as then: a context window that was too small, say), else a ``ModelError`` subclass of its
    name. Never retryable: its retries, if any, are in the recording already.
    """
    found = getattr(errors, failure.error_type, None)
    if (
        isinstance(found, type)
        and issubclass(found, ModelError)
        and not issubclass(found, RunStoppedError)
        and found.__init__ is ModelError.__init__
    ):
        kind: type[ModelError] = found
    elif failure.error_type.isidentifier():
        kind = _named_error(failure.error_type)
    else:
        kind = ModelError
    return kind(failure.error, status_code=failure.status_code, retryable=False)


@cache
def _named_error(name: str) -> type[ModelError]:
    """A ``ModelError`` class called ``name``: a run reports errors by class name."""
    return type(name, (ModelError,), {"__doc__": "A model error, as the recording names it."})
