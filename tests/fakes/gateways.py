"""A gateway double that records every request before delegating."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from core_agent.contracts.errors import ModelContextWindowError, ModelError
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
)
from shared.agent_protocol import AssistantMessage, TokenUsage


class FakeRecordingGateway(ILLMGateway):
    def __init__(self, inner: ILLMGateway, *, context_window: int | None = None) -> None:
        self.inner = inner
        self.requests: list[LLMRequest] = []
        self.window = context_window
        self.warmed_in: list[str] = []
        """The thread of each ``warm_up`` call."""

    def warm_up(self) -> None:
        import threading

        self.warmed_in.append(threading.current_thread().name)
        self.inner.warm_up()

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def context_window(self) -> int | None:
        return self.window if self.window is not None else self.inner.context_window()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        return await self.inner.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        self.requests.append(request)
        async for item in self.inner.stream(request):
            yield item


class FakeSequentialGateway(ILLMGateway):
    """Answers call *n* with reply *n*, whatever the request holds (unlike the scripted
    gateway, which counts the assistant turns in the request and so needs all of them)."""

    def __init__(self, replies: list[AssistantMessage]) -> None:
        self.replies = list(replies)
        self.calls = 0

    @property
    def model_name(self) -> str:
        return "fake/sequential"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        reply = self.replies[self.calls]
        self.calls += 1
        return LLMResponse(message=reply, usage=TokenUsage(), model=self.model_name)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        yield await self.complete(request)


Outcome = AssistantMessage | ModelError | BaseException
"""What a faulty gateway does on one call: answer, or raise."""


class FakeFaultyGateway(ILLMGateway):
    """Call *n* does ``outcomes[n]``: answers with the message, or raises the error.

        A streamed call that raises first streams ``partial`` text, as a cut stream does. When the
        outcomes run out it answers ``"ok"``. An ``anyio.Event`` outcome is a call that hangs until
    it is cancelled.
    """

    def __init__(self, outcomes: list[Outcome | anyio.Event], *, name: str = "fake/faulty") -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.name = name

    @property
    def model_name(self) -> str:
        return self.name

    async def _outcome(self) -> AssistantMessage | BaseException:
        outcome = self.outcomes[self.calls] if self.calls < len(self.outcomes) else None
        self.calls += 1
        if outcome is None:
            return AssistantMessage(content="ok")
        if isinstance(outcome, anyio.Event):
            await outcome.wait()
            raise AssertionError("a hanging call was released")
        return outcome

    async def complete(self, request: LLMRequest) -> LLMResponse:
        outcome = await self._outcome()
        if isinstance(outcome, BaseException):
            raise outcome
        return LLMResponse(message=outcome, usage=TokenUsage(), model=self.name)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        outcome = await self._outcome()
        if isinstance(outcome, BaseException):
            yield LLMTextDelta("partial")
            raise outcome
        if outcome.content:
            yield LLMTextDelta(outcome.content)
        yield LLMResponse(message=outcome, usage=TokenUsage(), model=self.name)


class FakeSmallWindowGateway(ILLMGateway):
    """Refuses, as a provider does, any prompt of more than ``max_messages`` messages (or,
    with ``max_chars``, whose messages' texts hold more than that many characters)."""

    def __init__(
        self, inner: ILLMGateway, *, max_messages: int, max_chars: int | None = None
    ) -> None:
        self.inner = inner
        self.max_messages = max_messages
        self.max_chars = max_chars
        self.requests: list[LLMRequest] = []

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def _check(self, request: LLMRequest) -> None:
        self.requests.append(request)
        chars = sum(len(getattr(m, "content", None) or "") for m in request.messages)
        if len(request.messages) > self.max_messages or (
            self.max_chars is not None and chars > self.max_chars
        ):
            raise ModelContextWindowError(
                f"maximum context length exceeded ({len(request.messages)} messages)",
                status_code=400,
            )

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self._check(request)
        return await self.inner.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        self._check(request)
        async for item in self.inner.stream(request):
            yield item
